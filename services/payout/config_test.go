package payout

import (
	"strings"
	"testing"
	"time"
)

// The bank-file rail's settings: read from the environment, and refused
// at start when the rail is on without the account it pays from, or when
// a value does not parse.
func TestBankRailConfig(t *testing.T) {
	for _, tc := range []struct {
		name    string
		give    map[string]string
		wantErr string
	}{
		{"sandbox by default", map[string]string{}, ""},
		{"file with the client account", map[string]string{"GPUBILL_PAYOUT_RAIL_BANK": "file", "GPUBILL_BANK_DEBTOR_NAME": "GPU Market client money",
			"GPUBILL_BANK_DEBTOR_ACCOUNT": "GB33 BUKB 2020 1555 5555 55", "GPUBILL_BANK_DEBTOR_AGENT": "BUKBGB22", "GPUBILL_BANK_CUTOFF": "16:30",
			"GPUBILL_BANK_TIMEZONE": "Asia/Shanghai", "GPUBILL_BANK_OUTBOX_DIR": "/srv/bank/out", "GPUBILL_BANK_INBOX_DIR": "/srv/bank/in",
			"GPUBILL_BANK_HOLIDAYS": "2026-12-25,2027-01-01"}, ""},
		{"file without the account", map[string]string{"GPUBILL_PAYOUT_RAIL_BANK": "file", "GPUBILL_BANK_DEBTOR_NAME": "x"}, "debtor account, debtor bank"},
		{"unknown rail", map[string]string{"GPUBILL_PAYOUT_RAIL_BANK": "swift"}, "want sandbox or file"},
		{"bad cutoff", map[string]string{"GPUBILL_BANK_CUTOFF": "25:00"}, "GPUBILL_BANK_CUTOFF"},
		{"bad zone", map[string]string{"GPUBILL_BANK_TIMEZONE": "Mars/Olympus"}, "GPUBILL_BANK_TIMEZONE"},
		{"bad holiday", map[string]string{"GPUBILL_BANK_HOLIDAYS": "2026-12-25,2026-13-01"}, `GPUBILL_BANK_HOLIDAYS: bank holiday "2026-13-01"`},
		{"the host's zone", map[string]string{"GPUBILL_BANK_TIMEZONE": "Local"}, "GPUBILL_BANK_TIMEZONE"},
		{"same inbox and outbox", map[string]string{"GPUBILL_PAYOUT_RAIL_BANK": "file", "GPUBILL_BANK_DEBTOR_NAME": "n", "GPUBILL_BANK_DEBTOR_ACCOUNT": "12345678",
			"GPUBILL_BANK_DEBTOR_AGENT": "102100099996", "GPUBILL_BANK_OUTBOX_DIR": "/srv/bank", "GPUBILL_BANK_INBOX_DIR": "/srv/bank"}, "must differ"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, k := range []string{"GPUBILL_PAYOUT_RAIL_BANK", "GPUBILL_BANK_DEBTOR_NAME", "GPUBILL_BANK_DEBTOR_ACCOUNT", "GPUBILL_BANK_DEBTOR_AGENT",
				"GPUBILL_BANK_CUTOFF", "GPUBILL_BANK_TIMEZONE", "GPUBILL_BANK_OUTBOX_DIR", "GPUBILL_BANK_INBOX_DIR", "GPUBILL_BANK_INITIATING_PARTY",
				"GPUBILL_BANK_HOLIDAYS"} {
				t.Setenv(k, tc.give[k])
			}
			c, err := ConfigFromEnv()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want one with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.give["GPUBILL_PAYOUT_RAIL_BANK"] == "file" {
				b := c.Bank
				if b.Debtor.Account != "GB33BUKB20201555555555" || b.Debtor.Agent != "BUKBGB22" || b.CutoffHour != 16 || b.CutoffMinute != 30 ||
					b.Location.String() != "Asia/Shanghai" || b.OutboxDir != "/srv/bank/out" || b.InboxDir != "/srv/bank/in" ||
					len(b.Holidays) != 2 || b.Holidays[1].Format(time.DateOnly) != "2027-01-01" {
					t.Errorf("bank config %+v", b)
				}
			} else if c.BankRail != "" || c.Bank.CutoffHour != 14 {
				t.Errorf("defaults: rail %q cutoff %d", c.BankRail, c.Bank.CutoffHour)
			}
		})
	}
}
