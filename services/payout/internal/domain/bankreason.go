package domain

import "strings"

// Failure codes a bank's ISO 20022 reason codes map to (what a provider and
// finance see as a payout's failure_code; the ISO code stays in the
// message).
const (
	FailAccountClosed     = "account_closed"
	FailAccountFrozen     = "account_frozen"
	FailInvalidAccount    = "invalid_account"
	FailInvalidBankCode   = "invalid_bank_code"
	FailNameMismatch      = "name_mismatch"
	FailTransactionBarred = "transaction_forbidden"
	FailInsufficientFunds = "insufficient_funds"
	FailDuplicate         = "duplicate"
	FailBeneficiaryDied   = "beneficiary_deceased"
	FailRegulatory        = "regulatory_reason"
	FailRefusedByCreditor = "refused_by_creditor"
	FailInvalidAmount     = "invalid_amount"
	FailUnsupported       = "unsupported_by_rail"
	FailBankRejected      = "bank_rejected" // a code not in the table (proprietary ones too)

	// The platform's own side: its paying account (status, identity,
	// its debtor data in the file, its configuration at the rail), its
	// transfer limits, its approvers. Not the payee's.
	FailPlatformAccount  = "platform_account_refused"
	FailPlatformLimit    = "platform_limit_exceeded"
	FailPlatformApproval = "platform_not_approved"

	// FailKYCRejected: the provider's KYC was rejected by finance after
	// its payout passed the gate, before its rail had the transfer
	// (Submit): never sent. Retried once finance verified the KYC again
	// (the new attempt goes through the gate), not after a method change.
	FailKYCRejected = "kyc_rejected"
)

// PayeeFailure reports whether a failure code is about the payee (its
// account, name, bank or standing): sent again to the same account it would
// fail the same way, so a retry waits for a method change. The others —
// the platform's own funds, its own paying account, limits or approvers, a
// rail not configured, a bank's rejection not about the account — are
// retried to the same method once the platform fixed its side: waiting for
// a method change left their money in available for good, the provider's
// method never having been wrong.
func PayeeFailure(code string) bool {
	switch code {
	case FailInsufficientFunds, FailUnsupported, FailBankRejected,
		FailPlatformAccount, FailPlatformLimit, FailPlatformApproval, FailKYCRejected:
		return false
	}
	return true
}

// bankReasons maps ISO 20022 external status/return reason codes
// (ExternalStatusReason1Code, ExternalReturnReason1Code) to failure codes.
// The debtor is the platform (its client money account, the file's
// initiating party): a code about the debtor is the platform's.
var bankReasons = map[string]struct{ code, text string }{
	"AC01": {FailInvalidAccount, "incorrect account number"},
	"AC02": {FailPlatformAccount, "invalid debtor account number (the platform's)"},
	"AC03": {FailInvalidAccount, "invalid creditor account number"},
	"AC04": {FailAccountClosed, "closed account number"},
	"AC06": {FailAccountFrozen, "blocked account"},
	"AC07": {FailAccountClosed, "closed creditor account number"},
	"AC13": {FailPlatformAccount, "invalid debtor account type (the platform's)"},
	"AG01": {FailTransactionBarred, "transaction forbidden on this type of account"},
	"AG03": {FailTransactionBarred, "transaction type not supported"},
	"AM01": {FailInvalidAmount, "amount zero"},
	"AM02": {FailInvalidAmount, "amount over the maximum allowed"},
	"AM03": {FailInvalidAmount, "currency not allowed"},
	"AM04": {FailInsufficientFunds, "insufficient funds (the platform's debtor account)"},
	"AM05": {FailDuplicate, "duplication"},
	"AM09": {FailInvalidAmount, "wrong amount"},
	"BE01": {FailNameMismatch, "creditor name inconsistent with the account"},
	"BE04": {FailInvalidAccount, "missing creditor address"},
	"CNOR": {FailInvalidBankCode, "creditor bank not registered"},
	"DT01": {FailBankRejected, "invalid date (execution date)"},
	"DUPL": {FailDuplicate, "duplicate payment"},
	"FF01": {FailBankRejected, "invalid file format"},
	"MD07": {FailBeneficiaryDied, "end customer deceased"},
	"MS02": {FailRefusedByCreditor, "refused by the creditor"},
	"MS03": {FailBankRejected, "reason not specified (bank)"},
	"RC01": {FailInvalidBankCode, "bank identifier incorrect"},
	"RR01": {FailPlatformAccount, "missing debtor account or identification (the platform's)"},
	"RR02": {FailPlatformAccount, "missing debtor name or address (the platform's)"},
	"RR03": {FailRegulatory, "missing creditor name or address"},
	"RR04": {FailRegulatory, "regulatory reason"},
}

// BankFailure maps an ISO reason code (with the bank's additional text)
// to a payout failure code and message: "AC06 blocked account: …".
func BankFailure(isoCode, info string) (code, message string) {
	isoCode = strings.ToUpper(strings.TrimSpace(isoCode))
	r, ok := bankReasons[isoCode]
	if !ok {
		r.code, r.text = FailBankRejected, "reason code not in gpubill's table"
	}
	message = isoCode + " " + r.text
	if isoCode == "" {
		message = "no reason given"
	}
	if info = strings.TrimSpace(info); info != "" {
		message += ": " + info
	}
	return r.code, message
}

// DuplicateMessageReason reports whether an ISO rejection reason, at any
// level of a status report, rejects a copy of what the bank already
// received (DU01–DU05: duplicate message, payment information, instruction
// or end-to-end id; AM05: duplication; DUPL: a duplicate of another
// payment): the copy is refused, the original stands. gpubill never sends
// one payment twice but as a copy of its file (a retry carries a new
// end-to-end id), so a duplicate rejection is always of a copy.
func DuplicateMessageReason(isoCode string) bool {
	switch strings.ToUpper(strings.TrimSpace(isoCode)) {
	case "DU01", "DU02", "DU03", "DU04", "DU05", "AM05", "DUPL":
		return true
	}
	return false
}
