package backup

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// splitPassword returns dsn (a URL or keyword/value string, as libpq reads
// them) without its password, and the password: the client tools get the
// rest on their command line and the password in PGPASSWORD, since ps
// shows a process's arguments to every user of the host.
func splitPassword(dsn string) (rest, password string, err error) {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		return splitURLPassword(dsn)
	}
	return splitKeywordPassword(dsn)
}

func splitURLPassword(dsn string) (string, string, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return "", "", errors.New("parse DATABASE_URL as a URL") // url's error quotes the URL, password and all
	}
	password, _ := u.User.Password()
	if u.User != nil {
		u.User = url.User(u.User.Username())
	}
	q := u.Query()
	if q.Has("password") {
		password = q.Get("password")
		q.Del("password")
		u.RawQuery = q.Encode()
	}
	return u.String(), password, nil
}

// splitKeywordPassword cuts the password pair out of a keyword/value
// string, leaving every other pair as written.
func splitKeywordPassword(dsn string) (string, string, error) {
	var rest strings.Builder
	password := ""
	for i := 0; i < len(dsn); {
		start := i
		for i < len(dsn) && isSpace(dsn[i]) {
			i++
		}
		if i == len(dsn) {
			break
		}
		key, value, end, err := keywordPair(dsn, i)
		if err != nil {
			return "", "", err
		}
		i = end
		if key == "password" {
			password = value
			continue
		}
		rest.WriteString(dsn[start:end])
	}
	return strings.TrimSpace(rest.String()), password, nil
}

// keywordPair reads the pair "key = value" at dsn[i:], the value bare or
// single-quoted with backslash escapes (libpq's rules), and returns the
// value unescaped and the index past it.
func keywordPair(dsn string, i int) (key, value string, end int, err error) {
	eq := strings.IndexByte(dsn[i:], '=')
	if eq < 0 {
		return "", "", 0, fmt.Errorf("DATABASE_URL: keyword at offset %d has no value", i)
	}
	key = strings.TrimSpace(dsn[i : i+eq])
	i += eq + 1
	for i < len(dsn) && isSpace(dsn[i]) {
		i++
	}
	quoted := i < len(dsn) && dsn[i] == '\''
	if quoted {
		i++
	}
	var v strings.Builder
	for ; i < len(dsn); i++ {
		c := dsn[i]
		switch {
		case c == '\\' && i+1 < len(dsn):
			i++
			v.WriteByte(dsn[i])
		case quoted && c == '\'':
			return key, v.String(), i + 1, nil
		case !quoted && isSpace(c):
			return key, v.String(), i, nil
		default:
			v.WriteByte(c)
		}
	}
	if quoted {
		return "", "", 0, fmt.Errorf("DATABASE_URL: unterminated quoted value of %s", key)
	}
	return key, v.String(), i, nil
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}
