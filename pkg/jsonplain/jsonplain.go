// Package jsonplain writes JSON strings by hand, byte for byte what
// encoding/json writes, for the hot paths that would otherwise marshal by
// reflection (the ledger's charge hashes, pricing's charge lines).
package jsonplain

import "encoding/json"

// Plain reports whether encoding/json writes s as itself between quotes:
// printable ASCII without the characters it escapes (", \, <, > and &).
func Plain(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

// AppendString appends s as a JSON string, as encoding/json writes it: a
// plain string between quotes, any other through json.Marshal.
func AppendString(b []byte, s string) ([]byte, error) {
	if !Plain(s) {
		q, err := json.Marshal(s)
		return append(b, q...), err
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"'), nil
}
