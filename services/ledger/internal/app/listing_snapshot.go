package app

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/gpubill/gpubill/pkg/cursor"
)

// snapshotBytesMax bounds a snapshot in a page token (pkg/cursor's value
// limit).
const snapshotBytesMax = cursor.ValueBytesMax

// packSnapshot writes a pg_snapshot ("xmin:xmax:xip,…") for a page token:
// xmax and the in-progress ids as offsets from xmin. A snapshot too long for
// the token keeps its first in-progress ids and ends at the next one (xmax
// lowered): every transaction from there on counts as not yet seen, so the
// next page may list one again but never leaves one out.
func packSnapshot(s string) (string, error) {
	xmin, xmax, xip, err := parseSnapshot(s)
	if err != nil || xmax < xmin || (len(xip) > 0 && (xip[0] < xmin || xip[len(xip)-1] >= xmax)) {
		return "", fmt.Errorf("snapshot %q: not a pg_snapshot", s)
	}
	for {
		var b strings.Builder
		b.WriteString(strconv.FormatUint(xmin, 10))
		b.WriteByte(':')
		b.WriteString(strconv.FormatUint(xmax-xmin, 10))
		b.WriteByte(':')
		for i, x := range xip {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.FormatUint(x-xmin, 10))
		}
		if b.Len() <= snapshotBytesMax {
			return b.String(), nil
		}
		keep := len(xip) / 2
		xmax, xip = xip[keep], xip[:keep]
	}
}

// unpackSnapshot reads packSnapshot's form back into pg_snapshot text; a
// value of another shape is a malformed token.
func unpackSnapshot(p string) (string, error) {
	xmin, dmax, dxip, err := parseSnapshot(p)
	if err != nil || dmax > ^uint64(0)-xmin {
		return "", cursor.Malformed()
	}
	// PostgreSQL refuses a pg_snapshot whose xmin or xmax is no valid
	// transaction id (its low 32 bits 0): a forged token's "0:0:" was a 500.
	if uint32(xmin) == 0 || uint32(xmin+dmax) == 0 {
		return "", cursor.Malformed()
	}
	var b strings.Builder
	b.WriteString(strconv.FormatUint(xmin, 10))
	b.WriteByte(':')
	b.WriteString(strconv.FormatUint(xmin+dmax, 10))
	b.WriteByte(':')
	for i, d := range dxip {
		if d >= dmax {
			return "", cursor.Malformed()
		}
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatUint(xmin+d, 10))
	}
	return b.String(), nil
}

// parseSnapshot splits "a:b:c,d,…" into its numbers; the list is strictly
// increasing and every number is at least a.
func parseSnapshot(s string) (a, b uint64, list []uint64, err error) {
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return 0, 0, nil, cursor.Malformed()
	}
	if a, err = strconv.ParseUint(parts[0], 10, 64); err != nil {
		return 0, 0, nil, cursor.Malformed()
	}
	if b, err = strconv.ParseUint(parts[1], 10, 64); err != nil {
		return 0, 0, nil, cursor.Malformed()
	}
	if parts[2] == "" {
		return a, b, nil, nil
	}
	for _, f := range strings.Split(parts[2], ",") {
		x, err := strconv.ParseUint(f, 10, 64)
		if err != nil || (len(list) > 0 && x <= list[len(list)-1]) {
			return 0, 0, nil, cursor.Malformed()
		}
		list = append(list, x)
	}
	return a, b, list, nil
}
