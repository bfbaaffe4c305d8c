package domain

import (
	"log/slog"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/gpubill/gpubill/pkg/apperr"
)

// Payout method types.
const (
	MethodBank   = "bank"
	MethodAlipay = "alipay"
	MethodWechat = "wechat"
)

// Field limits of a payout method.
const (
	accountNameLenMax = 200
	bankCodeLenMax    = 32
)

var (
	bankAccountRE = regexp.MustCompile(`^[0-9]{8,34}$`) // domestic account or card numbers
	ibanRE        = regexp.MustCompile(`^[A-Z]{2}[0-9]{2}[A-Z0-9]{11,30}$`)
	alipayRE      = regexp.MustCompile(`^([0-9]{11,16}|[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9.-]{1,190}\.[A-Za-z]{2,})$`) // phone, user id or e-mail
	wechatRE      = regexp.MustCompile(`^[A-Za-z0-9_-]{16,64}$`)
	bankCodeRE    = regexp.MustCompile(`^[A-Za-z0-9]{2,32}$`)
)

// Method is a provider's payout method. Its account number, Alipay id or
// WeChat openid is a secret: it leaves payout only masked (Masked), and a
// Method logs itself masked (LogValue).
type Method struct {
	Type, AccountName, AccountNumber, AlipayID, WechatOpenID, BankCode string
}

// Violation is one bad field of a method.
type Violation struct{ Field, Reason string }

// Validate checks a method: the type, and the identifier its type needs.
func (m Method) Validate() []Violation {
	var v []Violation
	add := func(f, r string) { v = append(v, Violation{f, r}) }
	if len(m.AccountName) > accountNameLenMax {
		add("account_name", "at most 200 characters")
	}
	// What a bank file (pain.001) cannot carry: a control character in one
	// name failed every cutoff's batch, every provider's bank payout with it.
	if !utf8.ValidString(m.AccountName) || strings.ContainsFunc(m.AccountName, unicode.IsControl) {
		add("account_name", "holds a control character or is not valid UTF-8")
	}
	switch m.Type {
	case MethodBank:
		n := strings.ReplaceAll(m.AccountNumber, " ", "")
		switch {
		case n == "":
			add("account_number", "required for type bank")
		case !bankAccountRE.MatchString(n) && !ibanRE.MatchString(n):
			add("account_number", "want 8 to 34 digits or an IBAN")
		}
		if strings.TrimSpace(m.AccountName) == "" {
			add("account_name", "required for type bank")
		}
		if m.BankCode == "" {
			add("bank_code", "required for type bank")
		} else if len(m.BankCode) > bankCodeLenMax || !bankCodeRE.MatchString(m.BankCode) {
			add("bank_code", "want 2 to 32 letters or digits")
		}
		if m.AlipayID != "" || m.WechatOpenID != "" {
			add("type", "bank takes account_number, not alipay_id or wechat_openid")
		}
	case MethodAlipay:
		if !alipayRE.MatchString(m.AlipayID) {
			add("alipay_id", "want an Alipay phone number, user id or e-mail")
		}
		if m.AccountNumber != "" || m.WechatOpenID != "" {
			add("type", "alipay takes alipay_id only")
		}
	case MethodWechat:
		if !wechatRE.MatchString(m.WechatOpenID) {
			add("wechat_openid", "want a WeChat openid (16 to 64 letters, digits, _ or -)")
		}
		if m.AccountNumber != "" || m.AlipayID != "" {
			add("type", "wechat takes wechat_openid only")
		}
	default:
		add("type", "want bank, alipay or wechat")
	}
	return v
}

// Normalized strips the spaces people type in account numbers.
func (m Method) Normalized() Method {
	m.AccountNumber = strings.ToUpper(strings.ReplaceAll(m.AccountNumber, " ", ""))
	m.AlipayID = strings.TrimSpace(m.AlipayID)
	m.WechatOpenID = strings.TrimSpace(m.WechatOpenID)
	return m
}

// Identifier is the account number, Alipay id or WeChat openid, per type.
func (m Method) Identifier() string {
	switch m.Type {
	case MethodAlipay:
		return m.AlipayID
	case MethodWechat:
		return m.WechatOpenID
	}
	return m.AccountNumber
}

// Masked returns the method with its identifiers masked.
func (m Method) Masked() Method {
	m.AccountNumber, m.AlipayID, m.WechatOpenID = apperr.Mask(m.AccountNumber), apperr.Mask(m.AlipayID), apperr.Mask(m.WechatOpenID)
	return m
}

// Summary is how a method shows in a payout's history: "bank ****0002".
func (m Method) Summary() string {
	if m.Type == "" {
		return "none"
	}
	return m.Type + " " + apperr.Mask(m.Identifier())
}

// String is masked, so a method printed by accident leaks nothing.
func (m Method) String() string { return m.Summary() }

// LogValue implements slog.LogValuer: a logged method is masked.
func (m Method) LogValue() slog.Value { return slog.StringValue(m.Summary()) }
