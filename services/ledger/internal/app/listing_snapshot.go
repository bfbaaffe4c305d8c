package app

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/cursor"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// Bounds of the snapshots in a page token: the one a page saw fills a
// value (pkg/cursor's limit); the upper bound of a run of late
// transactions (domain.TxLate) is smaller, so both fit in one token.
const (
	snapshotBytesMax      = cursor.ValueBytesMax
	upperSnapshotBytesMax = 256
)

// cutPage keeps at most n of page (read with n+1 in each part from `from`)
// and says where the next page starts (nil: the listing has ended). Late
// ones come first. More late ones than n are a run: the page holds n of
// them and nothing after the cursor, and the run goes on from the last
// under this page's snapshot (the run's, once one has begun), until a page
// holds its rest; the page after that reads from the run's snapshot. A
// page of the run lists nothing after the cursor: those would be seen
// under another snapshot than the late ones, and no one token could say
// which were. Otherwise the ones after the cursor fill the rest of the
// page. A page whose token names a snapshot the journal has not had lately
// (TxPage.Refused) is a 400 on page_token.
func cutPage(page domain.TxPage, from domain.TxLate, n int) (domain.TxPage, *domain.TxLate, error) {
	if from.Seen != "" && page.Refused {
		return domain.TxPage{}, nil, apperr.Invalid(cursor.Field, "the page token is too old (the journal has moved on too far since its page) or not one this server issued; start the listing again without one")
	}
	if len(page.Late) > n {
		page.Late, page.Next = page.Late[:n], nil
		upper := from.Upper
		if upper == "" {
			upper = page.Snapshot
		}
		last := page.Late[n-1]
		return page, &domain.TxLate{Seen: from.Seen, Upper: upper, XID: last.XID, ID: last.ID}, nil
	}
	if from.Upper != "" {
		page.Next = nil
		return page, &domain.TxLate{Seen: from.Upper}, nil
	}
	room := n - len(page.Late)
	if len(page.Next) <= room {
		return page, nil, nil
	}
	page.Next = page.Next[:room]
	return page, &domain.TxLate{Seen: page.Snapshot}, nil
}

// encodeLate is the token of the position vals with the late part from
// `from`: vals and the snapshot seen, then, in a run, its upper snapshot
// and the last (xid, id) listed.
func encodeLate(listing string, from domain.TxLate, vals ...string) (string, error) {
	seen, err := packSnapshot(from.Seen, snapshotBytesMax)
	if err != nil {
		return "", err
	}
	vals = append(vals, seen)
	if from.Upper != "" {
		upper, err := packSnapshot(from.Upper, upperSnapshotBytesMax)
		if err != nil {
			return "", err
		}
		vals = append(vals, upper, strconv.FormatUint(from.XID, 10), from.ID)
	}
	return cursor.Encode(listing, vals...), nil
}

// decodeLate reads encodeLate's token of n position values into the
// position and from.
func decodeLate(listing, token string, n int, from *domain.TxLate) (cursor.Position, error) {
	pos, err := cursor.Decode(listing, token, n+1)
	if err == nil {
		from.Seen, err = unpackSnapshot(pos.String(n))
		return pos, err
	}
	pos, errRun := cursor.Decode(listing, token, n+4)
	if errRun != nil {
		return cursor.Position{}, err
	}
	if from.Seen, err = unpackSnapshot(pos.String(n)); err != nil {
		return cursor.Position{}, err
	}
	if from.Upper, err = unpackSnapshot(pos.String(n + 1)); err != nil {
		return cursor.Position{}, err
	}
	if from.XID, err = strconv.ParseUint(pos.String(n+2), 10, 64); err != nil || uuid.Validate(pos.String(n+3)) != nil {
		return cursor.Position{}, cursor.Malformed()
	}
	from.ID = pos.String(n + 3)
	return pos, nil
}

// packSnapshot writes a pg_snapshot ("xmin:xmax:xip,…") for a page token:
// xmax and the in-progress ids as offsets from xmin. A snapshot longer than
// bytesMax keeps its first in-progress ids and ends at the next one (xmax
// lowered): every transaction from there on counts as not yet seen, so the
// next page may list one again but never leaves one out.
func packSnapshot(s string, bytesMax int) (string, error) {
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
		if b.Len() <= bytesMax {
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
