package domain

import "testing"

func TestBankFailure(t *testing.T) {
	for _, tc := range []struct {
		give, info, wantCode, wantMsg string
	}{
		{"AC04", "", FailAccountClosed, "AC04 closed account number"},
		{"AC06", "blocked by court order", FailAccountFrozen, "AC06 blocked account: blocked by court order"},
		{"ac01", "", FailInvalidAccount, "AC01 incorrect account number"},
		{"RC01", "", FailInvalidBankCode, "RC01 bank identifier incorrect"},
		{"MD07", "", FailBeneficiaryDied, "MD07 end customer deceased"},
		{"X999", "bank's own code", FailBankRejected, "X999 reason code not in gpubill's table: bank's own code"},
		{"", "", FailBankRejected, "no reason given"},
	} {
		code, msg := BankFailure(tc.give, tc.info)
		if code != tc.wantCode || msg != tc.wantMsg {
			t.Errorf("BankFailure(%q, %q) = %s %q, want %s %q", tc.give, tc.info, code, msg, tc.wantCode, tc.wantMsg)
		}
	}
	if !DuplicateMessageReason("DU01") || DuplicateMessageReason("AC04") {
		t.Error("DuplicateMessageReason")
	}
}
