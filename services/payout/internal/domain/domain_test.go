package domain

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/shopspring/decimal"
)

// Every (from, to) pair of statuses: exactly the transitions of DESIGN §6
// are allowed, every other one is refused with ErrIllegalTransition.
func TestTransitions(t *testing.T) {
	allowed := map[string]bool{
		"action_required→created": true, "action_required→canceled": true,
		"created→action_required": true, "created→submitted": true, "created→failed": true, "created→canceled": true,
		"submitted→in_transit": true, "submitted→paid": true, "submitted→failed": true, "submitted→canceled": true,
		"in_transit→paid": true, "in_transit→failed": true,
		"paid→returned":  true,
		"failed→created": true, "returned→created": true,
		"failed→settled_outside": true, "returned→settled_outside": true,
		"settled_outside→failed": true,
	}
	all := []string{StatusActionRequired, StatusCreated, StatusSubmitted, StatusInTransit, StatusPaid, StatusFailed, StatusCanceled, StatusReturned,
		StatusSettledOutside}
	if got := Statuses(); len(got) != len(all) {
		t.Fatalf("statuses %v, want %d", got, len(all))
	}
	seen := 0
	for _, from := range all {
		for _, to := range all {
			give := from + "→" + to
			err := CheckTransition(from, to)
			if allowed[give] {
				seen++
				if err != nil {
					t.Errorf("%s refused: %v", give, err)
				}
				continue
			}
			if !errors.Is(err, ErrIllegalTransition) {
				t.Errorf("%s allowed, want refused", give)
			}
		}
	}
	if seen != len(allowed) {
		t.Errorf("checked %d allowed transitions, want %d", seen, len(allowed))
	}
	if err := CheckTransition("bogus", StatusCreated); err == nil {
		t.Error("unknown status accepted")
	}
}

func TestGate(t *testing.T) {
	m := DefaultMinimums()
	tests := []struct {
		give       GateInput
		wantStatus string
		wantReason string
	}{
		{GateInput{KYC: KYCVerified, HasMethod: true, Currency: "CNY", Amount: decimal.RequireFromString("100.00")}, StatusCreated, ""},
		{GateInput{KYC: KYCVerified, HasMethod: true, Currency: "CNY", Amount: decimal.RequireFromString("99.99")}, StatusActionRequired, "under minimum 100.00 CNY: stays available and joins the next payout"},
		{GateInput{KYC: KYCVerified, HasMethod: true, Currency: "USD", Amount: decimal.RequireFromString("24.99")}, StatusActionRequired, "under minimum 25.00 USD: stays available and joins the next payout"},
		{GateInput{KYC: KYCVerified, HasMethod: true, Currency: "JPY", Amount: decimal.RequireFromString("1")}, StatusCreated, ""},
		{GateInput{KYC: "", HasMethod: true, Currency: "CNY", Amount: decimal.RequireFromString("500")}, StatusActionRequired, "kyc not verified (missing)"},
		{GateInput{KYC: KYCPending, HasMethod: true, Currency: "CNY", Amount: decimal.RequireFromString("500")}, StatusActionRequired, "kyc not verified (pending)"},
		{GateInput{KYC: KYCVerified, HasMethod: false, Currency: "CNY", Amount: decimal.RequireFromString("500")}, StatusActionRequired, "no payout method"},
		{GateInput{KYC: KYCVerified, HasMethod: true, Held: "dispute", Currency: "CNY", Amount: decimal.RequireFromString("500")}, StatusActionRequired, "held by finance: dispute"},
	}
	for _, tt := range tests {
		st, reason := m.Gate(tt.give)
		if st != tt.wantStatus || reason != tt.wantReason {
			t.Errorf("Gate(%+v) = %s %q, want %s %q", tt.give, st, reason, tt.wantStatus, tt.wantReason)
		}
	}
}

func TestParseMinimums(t *testing.T) {
	m, err := ParseMinimums("usd=10, EUR=20.50")
	if err != nil {
		t.Fatal(err)
	}
	for cur, want := range map[string]string{"USD": "10", "EUR": "20.5", "CNY": "100"} {
		if !m[cur].Equal(decimal.RequireFromString(want)) {
			t.Errorf("%s = %s, want %s", cur, m[cur], want)
		}
	}
	for _, bad := range []string{"USD", "USD=-1", "USD=x", "RMB=50", "CNY=100.005", "JPY=100.5"} {
		if _, err := ParseMinimums(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestMovements(t *testing.T) {
	tests := []struct {
		give string
		want Movement
	}{
		{StatusSubmitted, Movement{"provider:p-1:available", "provider:p-1:in_transit"}},
		{StatusPaid, Movement{"provider:p-1:in_transit", "bank:client"}},
		{StatusFailed, Movement{"provider:p-1:in_transit", "provider:p-1:available"}},
		{StatusReturned, Movement{"bank:client", "provider:p-1:available"}},
		// Posted only for a payout canceled in the bank-file queue (CanceledInQueue).
		{StatusCanceled, Movement{"provider:p-1:in_transit", "provider:p-1:available"}},
	}
	for _, tt := range tests {
		got, ok := MovementFor("p-1", tt.give)
		if !ok || got != tt.want {
			t.Errorf("%s: %+v %v, want %+v", tt.give, got, ok, tt.want)
		}
	}
	for _, s := range []string{StatusCreated, StatusActionRequired, StatusInTransit} {
		if _, ok := MovementFor("p-1", s); ok {
			t.Errorf("%s moves money", s)
		}
	}
}

// Only a payout canceled after its submission (its bank transfer taken out
// of the queue) has an amount to put back in available: one canceled
// before it, or canceled on a retry's new attempt, moved nothing.
func TestCanceledInQueue(t *testing.T) {
	tests := []struct {
		name string
		give Payout
		want bool
	}{
		{"canceled in the queue", Payout{Status: StatusCanceled, RailRef: "po_1"}, true},
		{"canceled before submission", Payout{Status: StatusCanceled}, false},
		{"submitted", Payout{Status: StatusSubmitted, RailRef: "po_1"}, false},
	}
	for _, tt := range tests {
		if got := CanceledInQueue(tt.give); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestMethodValidate(t *testing.T) {
	tests := []struct {
		give       Method
		wantFields string
	}{
		{Method{Type: "bank", AccountName: "Li Wei", AccountNumber: "6222 0000 1234 0002", BankCode: "ICBK"}, ""},
		{Method{Type: "bank", AccountName: "Li Wei", AccountNumber: "DE89370400440532013000", BankCode: "COBADEFF"}, ""},
		{Method{Type: "bank", AccountNumber: "12", BankCode: "x"}, "account_number,account_name,bank_code"},
		{Method{Type: "bank", AccountName: "A", AccountNumber: "62220000", BankCode: "ICBK", AlipayID: "13800000000"}, "type"},
		// A bank file cannot carry it: one such name failed every batch.
		{Method{Type: "bank", AccountName: "Li\x01Wei", AccountNumber: "62220000", BankCode: "ICBK"}, "account_name"},
		{Method{Type: "bank", AccountName: "Li\nWei", AccountNumber: "62220000", BankCode: "ICBK"}, "account_name"},
		{Method{Type: "bank", AccountName: "李\xffWei", AccountNumber: "62220000", BankCode: "ICBK"}, "account_name"},
		{Method{Type: "bank", AccountName: "李伟", AccountNumber: "62220000", BankCode: "ICBK"}, ""},
		{Method{Type: "alipay", AlipayID: "13800000002"}, ""},
		{Method{Type: "alipay", AlipayID: "li@example.com"}, ""},
		{Method{Type: "alipay", AlipayID: "not an id"}, "alipay_id"},
		{Method{Type: "wechat", WechatOpenID: "oUpF8uMuAJO_M2pxb1Q9zNjW0002"}, ""},
		{Method{Type: "wechat", WechatOpenID: "short"}, "wechat_openid"},
		{Method{Type: "paypal"}, "type"},
	}
	for _, tt := range tests {
		var got []string
		for _, v := range tt.give.Normalized().Validate() {
			got = append(got, v.Field)
		}
		if strings.Join(got, ",") != tt.wantFields {
			t.Errorf("%s: fields %v, want %q", tt.give.Type, got, tt.wantFields)
		}
	}
}

// An account number never shows unmasked: not masked, not printed, not logged.
func TestMethodMasked(t *testing.T) {
	m := Method{Type: "bank", AccountName: "Li Wei", AccountNumber: "6222000012340002", BankCode: "ICBK"}
	if got := m.Masked().AccountNumber; got != "****0002" {
		t.Errorf("masked %q", got)
	}
	var sb strings.Builder
	slog.New(slog.NewJSONHandler(&sb, nil)).Info("method", "method", m)
	for _, s := range []string{sb.String(), fmt.Sprint(m), fmt.Sprintf("%v %s", m, m)} {
		if strings.Contains(s, "622200001234") {
			t.Errorf("account number leaked: %s", s)
		}
	}
	if got := (Method{Type: "alipay", AlipayID: "12"}).Masked().AlipayID; got != "**" {
		t.Errorf("short identifier masked %q", got)
	}
	// Whole characters (apperr.Mask): a webhook secret of Chinese
	// characters cut inside one was invalid UTF-8, which the answer's
	// encoding refused (a 500 after the webhook was stored).
	for give, want := range map[string]string{"钱包密钥钱包密钥钱包密钥钱包密钥": "****钱包密钥", "密钥": "**", "ab密钥cd": "****密钥cd"} {
		if got := (Method{Type: "wechat", WechatOpenID: give}).Masked().WechatOpenID; got != want || !utf8.ValidString(got) {
			t.Errorf("%q masked %q, want %q", give, got, want)
		}
	}
}

// A status reason names amounts in their currency's minor units: two
// decimals printed a 0.004 ETH payout as 0.00, and 99.999999 USDC as 100.00
// beside a payout of 100.000000.
func TestReasonsInTheCurrencysUnits(t *testing.T) {
	d := decimal.RequireFromString
	for _, tt := range []struct{ got, want string }{
		{InsufficientAvailableReason(d("99.999999"), d("100"), "USDC"), "available 99.999999 USDC does not cover the payout's 100.000000"},
		{InsufficientAvailableReason(d("0.001"), d("0.004"), "ETH"), "available 0.001"},
		{UnderMinimumReason(d("5000"), "JPY"), "under minimum 5000 JPY"},
		{UnderMinimumReason(d("100"), "CNY"), "under minimum 100.00 CNY"},
	} {
		if !strings.Contains(tt.got, tt.want) {
			t.Errorf("%q, want it to read %q", tt.got, tt.want)
		}
	}
}
