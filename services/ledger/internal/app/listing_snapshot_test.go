package app

import (
	"fmt"
	"strings"
	"testing"
)

func TestPackSnapshot(t *testing.T) {
	for _, s := range []string{"100:100:", "100:105:100,103", "18446744073709551000:18446744073709551615:18446744073709551001"} {
		p, err := packSnapshot(s, snapshotBytesMax)
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		back, err := unpackSnapshot(p)
		if err != nil || back != s {
			t.Errorf("%s: packed %q, back %q %v", s, p, back, err)
		}
	}
	// Too many transactions in progress for a token: it ends at the first
	// one left out, so every one from there counts as unseen (listed again,
	// never left out).
	ids := make([]string, 400)
	for i := range ids {
		ids[i] = fmt.Sprint(1_000_000 + 1000*i)
	}
	s := "1000000:1500000:" + strings.Join(ids, ",")
	p, err := packSnapshot(s, snapshotBytesMax)
	if err != nil || len(p) > snapshotBytesMax {
		t.Fatalf("packed %d bytes %v", len(p), err)
	}
	back, err := unpackSnapshot(p)
	if err != nil {
		t.Fatal(err)
	}
	xmin, xmax, xip, err := parseSnapshot(back)
	if err != nil || xmin != 1_000_000 || len(xip) == 0 || len(xip) >= 400 || xmax != uint64(1_000_000+1000*len(xip)) {
		t.Errorf("truncated to %d..%d with %d in progress", xmin, xmax, len(xip))
	}
	// "0:0:", "4294967296:0:", "1:4294967295:": an xmin or xmax PostgreSQL
	// takes for no transaction id (a 500 from a forged token).
	for _, bad := range []string{"", "1:2", "x:1:", "5:3:3", "5:3:2,1", "5:3:1,1", "18446744073709551615:1:", "0:0:", "4294967296:0:", "1:4294967295:"} {
		if _, err := unpackSnapshot(bad); err == nil {
			t.Errorf("%q: unpacked", bad)
		}
	}
	if _, err := packSnapshot("100:90:", snapshotBytesMax); err == nil {
		t.Error("xmax before xmin packed")
	}
}
