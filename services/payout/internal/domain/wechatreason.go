package domain

// FailWeChatPayRejected is a WeChat Pay code not in the table.
const FailWeChatPayRejected = "wechatpay_rejected"

// wechatReasons maps the codes that end a WeChat Pay transfer for good —
// fail_reason of a FAIL transfer bill, and the error codes of a transfer
// request the platform refused without making a bill — to failure codes.
// Codes that leave the outcome unknown (SYSTEM_ERROR, FREQUENCY_LIMITED, a
// 5xx) are not here: the rail queries by out_bill_no instead. The merchant
// (the payer, its approvers) is the platform: its codes are the
// platform's (PayeeFailure).
var wechatReasons = map[string]struct{ code, text string }{
	"ACCOUNT_FROZEN":                         {FailAccountFrozen, "the payee's WeChat account is frozen"},
	"PAYEE_ACCOUNT_ABNORMAL":                 {FailAccountFrozen, "the payee's WeChat account cannot receive (abnormal)"},
	"ACCOUNT_NOT_EXIST":                      {FailInvalidAccount, "the payee's WeChat account does not exist"},
	"OPENID_INVALID":                         {FailInvalidAccount, "the openid does not belong to the AppID"},
	"NAME_NOT_CORRECT":                       {FailNameMismatch, "the payee's name does not match the account"},
	"ID_CARD_NOT_CORRECT":                    {FailNameMismatch, "the payee's identity does not match the account"},
	"REAL_NAME_CHECK_FAIL":                   {FailRegulatory, "the payee's account is not real-name verified"},
	"TRANSFER_RISK":                          {FailTransactionBarred, "WeChat Pay stopped the transfer as risky"},
	"RECEIVE_ACCOUNT_NOT_PERMMIT":            {FailTransactionBarred, "the payee's account may not receive transfers"},
	"PAYER_ACCOUNT_ABNORMAL":                 {FailPlatformAccount, "the platform's WeChat Pay merchant account may not pay"},
	"TRANSFER_QUOTA_EXCEED":                  {FailInvalidAmount, "over the payee's single transfer limit"},
	"DAY_RECEIVED_QUOTA_EXCEED":              {FailInvalidAmount, "over the payee's daily receiving limit"},
	"MONTH_RECEIVED_QUOTA_EXCEED":            {FailInvalidAmount, "over the payee's monthly receiving limit"},
	"DAY_RECEIVED_COUNT_EXCEED":              {FailInvalidAmount, "over the payee's daily number of transfers"},
	"REALNAME_ACCOUNT_RECEIVED_QUOTA_EXCEED": {FailInvalidAmount, "over the payee's real-name receiving limit"},
	"BLOCK_B2C_USERLIMITAMOUNT_MONTH":        {FailInvalidAmount, "over the payee's monthly limit from merchants"},
	"NOT_ENOUGH":                             {FailInsufficientFunds, "the platform's WeChat Pay balance does not cover the transfer"},
	"OVERDUE_CLOSE":                          {FailRefusedByCreditor, "the payee did not confirm the transfer in time: closed"},
	"MERCHANT_REJECT":                        {FailPlatformApproval, "the platform's approver rejected the transfer"},
	"MERCHANT_NOT_CONFIRM":                   {FailPlatformApproval, "the platform's approver did not confirm in time"},
	"TRANSFER_SCENE_UNAVAILABLE":             {FailPlatformAccount, "the transfer scene is not available to the platform's merchant account"},
	"TRANSFER_REMARK_SET_FAIL":               {FailWeChatPayRejected, "the transfer remark was refused"},
	"CANCELLED":                              {FailWeChatPayRejected, "the transfer was cancelled"},
	"OTHER_FAIL_REASON_TYPE":                 {FailWeChatPayRejected, "refused by WeChat Pay"},
}

// WeChatPayFinal reports whether a code of a refused transfer request
// ends the transfer for good (NOT_ENOUGH: no bill was made); other request
// errors are retried and logged (a request the platform found malformed
// or unsigned), or left unknown and queried.
func WeChatPayFinal(code string) bool {
	_, ok := wechatReasons[code]
	return ok
}

// WeChatPayFailure maps a WeChat Pay code (with its message) to a payout
// failure code and message: "ACCOUNT_FROZEN the payee's WeChat account is
// frozen: 该用户账户被冻结".
func WeChatPayFailure(code, msg string) (string, string) {
	r, ok := wechatReasons[code]
	if !ok {
		r = struct{ code, text string }{FailWeChatPayRejected, "refused by WeChat Pay"}
	}
	text := code + " " + r.text
	if msg != "" {
		text += ": " + msg
	}
	return r.code, text
}
