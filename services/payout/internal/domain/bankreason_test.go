package domain

import (
	"strings"
	"testing"
)

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

// A failure on the platform's own side — its paying account barred or
// unverified, its daily limit, its approver rejecting or not confirming,
// its transfer scene, its own debtor data missing from the bank file — is
// not the payee's: finance retries it to the same method once the platform
// fixed its side. Classed as the payee's, :retry waited for a method change
// that never had to come, the money in available for good. A failure about
// the payee's account, name or standing still waits for a method change.
func TestPlatformSideFailuresAreNotThePayees(t *testing.T) {
	alipay := func(c string) (string, string) { return AlipayFailure(c, "") }
	wechat := func(c string) (string, string) { return WeChatPayFailure(c, "") }
	bank := func(c string) (string, string) { return BankFailure(c, "") }
	for _, tc := range []struct {
		rail  func(string) (string, string)
		code  string
		payee bool
	}{
		{alipay, "PAYER_STATUS_ERROR", false},
		{alipay, "PAYER_USER_INFO_ERROR", false},
		{alipay, "EXCEED_LIMIT_DM_AMOUNT", false},
		{wechat, "PAYER_ACCOUNT_ABNORMAL", false},
		{wechat, "MERCHANT_REJECT", false},
		{wechat, "MERCHANT_NOT_CONFIRM", false},
		{wechat, "TRANSFER_SCENE_UNAVAILABLE", false},
		{bank, "RR01", false},
		{bank, "RR02", false},
		// The table's own texts name these the platform's (the payer's,
		// the debtor's) too.
		{alipay, "PAYCARD_UNABLE_PAYMENT", false},
		{alipay, "NO_AVAILABLE_PAYMENT_TOOLS", false},
		{bank, "AC02", false},
		{bank, "AC13", false},
		// The platform's balance, already retried at once (b86247a).
		{alipay, "PAYER_BALANCE_NOT_ENOUGH", false},
		{wechat, "NOT_ENOUGH", false},
		{bank, "AM04", false},
		// The payee's: a method change first.
		{bank, "AC04", true},
		{bank, "AC01", true},
		{bank, "BE01", true},
		{bank, "RR03", true},
		{bank, "MD07", true},
		{alipay, "PAYEE_USER_INFO_ERROR", true},
		{alipay, "PAYEE_ACCOUNT_STATUS_ERROR", true},
		{alipay, "EXCEED_LIMIT_UNRN_DM_AMOUNT", true},
		{wechat, "ACCOUNT_FROZEN", true},
		{wechat, "PAYEE_ACCOUNT_ABNORMAL", true},
		{wechat, "NAME_NOT_CORRECT", true},
		{wechat, "DAY_RECEIVED_QUOTA_EXCEED", true},
	} {
		code, msg := tc.rail(tc.code)
		if got := PayeeFailure(code); got != tc.payee {
			t.Errorf("%s: failure_code %s (%q) is the payee's: %v, want %v", tc.code, code, msg, got, tc.payee)
		}
		// What the provider reads names whose side failed.
		if !tc.payee && !strings.Contains(msg, "platform") {
			t.Errorf("%s: failure_message %q does not say the failure is the platform's", tc.code, msg)
		}
	}
}
