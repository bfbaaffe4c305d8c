package domain

// FailAlipayRejected is an Alipay error code not in the table.
const FailAlipayRejected = "alipay_rejected"

// alipayReasons maps the error codes of Alipay's single transfer
// (sub_code of alipay.fund.trans.uni.transfer, error_code of
// alipay.fund.trans.common.query) that end a transfer for good to failure
// codes. Codes that leave the outcome unknown (SYSTEM_ERROR …) are not
// here: the rail queries again instead (AlipayUnknown). The payer is the
// platform: a PAYER_ code, or the payer's daily limit, is the platform's
// (PayeeFailure).
var alipayReasons = map[string]struct{ code, text string }{
	"PAYEE_NOT_EXIST":                  {FailInvalidAccount, "the payee's Alipay account does not exist"},
	"PAYEE_ACC_OCUPIED":                {FailInvalidAccount, "the payee's logon id belongs to several accounts: pay by user id"},
	"PAYEE_ACCOUNT_NOT_EXSIT":          {FailInvalidAccount, "the payee's Alipay account does not exist"},
	"PAYEE_ACCOUNT_STATUS_ERROR":       {FailAccountFrozen, "the payee's Alipay account is frozen or closed"},
	"PAYEE_USERINFO_STATUS_ERROR":      {FailAccountFrozen, "the payee's Alipay account status does not allow receiving"},
	"PAYEE_USER_INFO_ERROR":            {FailNameMismatch, "the payee's name does not match the account"},
	"PAYEE_CERT_INFO_ERROR":            {FailNameMismatch, "the payee's identity does not match the account"},
	"PAYEE_NOT_RELNAME_CERTIFY":        {FailRegulatory, "the payee's account is not real-name verified"},
	"PERMIT_CHECK_PERM_IDENTITY_THEFT": {FailRegulatory, "the payee's account is suspected of identity theft"},
	"PAYER_BALANCE_NOT_ENOUGH":         {FailInsufficientFunds, "the platform's Alipay balance does not cover the transfer"},
	"BALANCE_IS_NOT_ENOUGH":            {FailInsufficientFunds, "the platform's Alipay balance does not cover the transfer"},
	"EXCEED_LIMIT_SM_AMOUNT":           {FailInvalidAmount, "over the single transfer limit"},
	"EXCEED_LIMIT_SM_MIN_AMOUNT":       {FailInvalidAmount, "under the minimum transfer (0.10)"},
	"EXCEED_LIMIT_DM_AMOUNT":           {FailPlatformLimit, "over the platform's daily transfer limit"},
	"EXCEED_LIMIT_PERSONAL_SM_AMOUNT":  {FailInvalidAmount, "over the limit of one transfer to a person"},
	"EXCEED_LIMIT_UNRN_DM_AMOUNT":      {FailInvalidAmount, "over the daily limit to an unverified payee"},
	"PAYCARD_UNABLE_PAYMENT":           {FailPlatformAccount, "the platform's Alipay account cannot pay from its balance"},
	"PAYER_STATUS_ERROR":               {FailPlatformAccount, "the platform's Alipay account cannot pay (its status)"},
	"PAYER_USER_INFO_ERROR":            {FailPlatformAccount, "the platform's Alipay account cannot pay (its identity)"},
	"PAYMENT_FAIL":                     {FailAlipayRejected, "payment failed"},
	"PAYER_PAYEE_CANNOT_SAME":          {FailInvalidAccount, "the payee is the platform's own account"},
	"NO_AVAILABLE_PAYMENT_TOOLS":       {FailPlatformAccount, "no payment tool available to the platform's Alipay account"},
}

// alipayUnknown are codes after which the transfer may or may not exist:
// the rail queries by out_biz_no instead of failing the payout.
var alipayUnknown = map[string]bool{
	"SYSTEM_ERROR": true, "aop.SYSTEM_ERROR": true, "isp.unknow-error": true, "ORDER_IS_PROCESSING": true,
}

// AlipayUnknown reports whether an Alipay error code leaves a transfer's
// outcome unknown.
func AlipayUnknown(code string) bool { return alipayUnknown[code] }

// AlipayFailure maps an Alipay error code (with Alipay's message) to a
// payout failure code and message: "PAYEE_ACCOUNT_STATUS_ERROR the payee's
// Alipay account is frozen or closed: 收款账号状态异常".
func AlipayFailure(code, msg string) (string, string) {
	r, ok := alipayReasons[code]
	if !ok {
		r = struct{ code, text string }{FailAlipayRejected, "refused by Alipay"}
	}
	text := code + " " + r.text
	if msg != "" {
		text += ": " + msg
	}
	return r.code, text
}
