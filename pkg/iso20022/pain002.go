package iso20022

import (
	"fmt"
	"strings"
	"time"
)

// Transaction and group statuses of a pain.002 (ExternalPaymentTransactionStatus1Code
// and ExternalPaymentGroupStatus1Code).
const (
	StatusReceived            = "RCVD"
	StatusPending             = "PDNG"
	StatusAcceptedTechnical   = "ACTC"
	StatusAcceptedCustomer    = "ACCP"
	StatusAcceptedSettlingIn  = "ACSP"
	StatusAcceptedSettled     = "ACSC"
	StatusAcceptedCreditorAcc = "ACCC"
	StatusAcceptedWithChange  = "ACWC"
	StatusAcceptedNoPosting   = "ACWP"
	StatusAcceptedFunds       = "ACFC"
	StatusPartiallyAccepted   = "PART"
	StatusRejected            = "RJCT"
)

// Accepted reports whether a status means the bank has taken the payment
// for execution (beyond a technical check).
func Accepted(status string) bool {
	switch status {
	case StatusAcceptedCustomer, StatusAcceptedSettlingIn, StatusAcceptedSettled, StatusAcceptedCreditorAcc,
		StatusAcceptedWithChange, StatusAcceptedNoPosting, StatusAcceptedFunds:
		return true
	}
	return false
}

var knownStatus = map[string]bool{
	StatusReceived: true, StatusPending: true, StatusAcceptedTechnical: true, StatusAcceptedCustomer: true,
	StatusAcceptedSettlingIn: true, StatusAcceptedSettled: true, StatusAcceptedCreditorAcc: true,
	StatusAcceptedWithChange: true, StatusAcceptedNoPosting: true, StatusAcceptedFunds: true,
	StatusPartiallyAccepted: true, StatusRejected: true,
}

// StatusReport is a parsed pain.002: the bank's answer to one pain.001.
type StatusReport struct {
	MessageID             string
	CreatedAt             time.Time
	OriginalMessageID     string // the pain.001's MsgId
	OriginalMessageNameID string // "pain.001.001.09"
	GroupStatus           string // "" when the report gives none
	GroupReasons          []Reason
	// OriginalTransactions is the original message's NbOfTxs as the
	// report states it (OrgnlNbOfTxs); 0 when not given.
	OriginalTransactions int
	PaymentInfos         []PaymentInfoStatus
}

// PaymentInfoStatus is OrgnlPmtInfAndSts.
type PaymentInfoStatus struct {
	Path                  string
	OriginalPaymentInfoID string
	Status                string
	Reasons               []Reason
	OriginalTransactions  int // the PmtInf's NbOfTxs as the report states it (OrgnlNbOfTxs); 0 when not given
	Transactions          []TransactionStatus
}

// TransactionStatus is TxInfAndSts: one payment's status.
type TransactionStatus struct {
	Path                  string // the element, for reports ("…/TxInfAndSts[3]")
	OriginalEndToEndID    string
	OriginalInstructionID string
	Status                string
	Reasons               []Reason
}

type xmlPain002In struct {
	Rpt struct {
		GrpHdr struct {
			MsgId   string `xml:"MsgId"`
			CreDtTm string `xml:"CreDtTm"`
		} `xml:"GrpHdr"`
		OrgnlGrpInfAndSts struct {
			OrgnlMsgId   string         `xml:"OrgnlMsgId"`
			OrgnlMsgNmId string         `xml:"OrgnlMsgNmId"`
			OrgnlNbOfTxs string         `xml:"OrgnlNbOfTxs"`
			GrpSts       string         `xml:"GrpSts"`
			StsRsnInf    []xmlStsRsnInf `xml:"StsRsnInf"`
		} `xml:"OrgnlGrpInfAndSts"`
		OrgnlPmtInfAndSts []xmlOrgnlPmtInfAndSts `xml:"OrgnlPmtInfAndSts"`
	} `xml:"CstmrPmtStsRpt"`
}

type xmlOrgnlPmtInfAndSts struct {
	OrgnlPmtInfId string           `xml:"OrgnlPmtInfId"`
	OrgnlNbOfTxs  string           `xml:"OrgnlNbOfTxs"`
	PmtInfSts     string           `xml:"PmtInfSts"`
	StsRsnInf     []xmlStsRsnInf   `xml:"StsRsnInf"`
	TxInfAndSts   []xmlTxInfAndSts `xml:"TxInfAndSts"`
}

type xmlTxInfAndSts struct {
	OrgnlInstrId    string         `xml:"OrgnlInstrId"`
	OrgnlEndToEndId string         `xml:"OrgnlEndToEndId"`
	TxSts           string         `xml:"TxSts"`
	StsRsnInf       []xmlStsRsnInf `xml:"StsRsnInf"`
}

type xmlStsRsnInf struct {
	Rsn      *xmlReasonChoice `xml:"Rsn"`
	AddtlInf []string         `xml:"AddtlInf"`
}

func reasons(path string, in []xmlStsRsnInf) ([]Reason, error) {
	var out []Reason
	for i, r := range in {
		rs, err := r.Rsn.reason(fmt.Sprintf("%s/StsRsnInf[%d]/Rsn", path, i), r.AddtlInf)
		if err != nil {
			return nil, err
		}
		out = append(out, rs)
	}
	return out, nil
}

func checkStatus(path, s string, optional bool) error {
	if s == "" && optional {
		return nil
	}
	if !knownStatus[s] {
		return malformed(path, "unknown status %q", clip(s))
	}
	return nil
}

// ParsePain002 reads a pain.002 strictly: the group header, the original
// message it answers, and every payment status (a TxInfAndSts without an
// OrgnlEndToEndId or TxSts, or with an unknown status, is malformed).
func ParsePain002(b []byte) (StatusReport, error) {
	k, err := Detect(b)
	if err != nil {
		return StatusReport{}, err
	}
	if k.Family() != FamilyPain002 {
		return StatusReport{}, malformed("Document", "want a pain.002, got %s", k)
	}
	var doc xmlPain002In
	if err := unmarshal(b, &doc); err != nil {
		return StatusReport{}, err
	}
	r := doc.Rpt
	const root = "CstmrPmtStsRpt"
	out := StatusReport{MessageID: strings.TrimSpace(r.GrpHdr.MsgId), OriginalMessageID: strings.TrimSpace(r.OrgnlGrpInfAndSts.OrgnlMsgId),
		OriginalMessageNameID: strings.TrimSpace(r.OrgnlGrpInfAndSts.OrgnlMsgNmId), GroupStatus: strings.TrimSpace(r.OrgnlGrpInfAndSts.GrpSts),
		OriginalTransactions: count(r.OrgnlGrpInfAndSts.OrgnlNbOfTxs)}
	if err := required(root+"/GrpHdr/MsgId", out.MessageID); err != nil {
		return out, err
	}
	if out.CreatedAt, err = parseDateTime(root+"/GrpHdr/CreDtTm", r.GrpHdr.CreDtTm); err != nil {
		return out, err
	}
	g := root + "/OrgnlGrpInfAndSts"
	if err := required(g+"/OrgnlMsgId", out.OriginalMessageID); err != nil {
		return out, err
	}
	if err := required(g+"/OrgnlMsgNmId", out.OriginalMessageNameID); err != nil {
		return out, err
	}
	if err := checkStatus(g+"/GrpSts", out.GroupStatus, true); err != nil {
		return out, err
	}
	if out.GroupReasons, err = reasons(g, r.OrgnlGrpInfAndSts.StsRsnInf); err != nil {
		return out, err
	}
	for i, x := range r.OrgnlPmtInfAndSts {
		pi, err := parsePaymentInfoStatus(fmt.Sprintf("%s/OrgnlPmtInfAndSts[%d]", root, i), x)
		if err != nil {
			return out, err
		}
		out.PaymentInfos = append(out.PaymentInfos, pi)
	}
	if out.GroupStatus == "" && len(out.PaymentInfos) == 0 {
		return out, malformed(g+"/GrpSts", "a report with no payment statuses needs a group status")
	}
	return out, nil
}

// countDigitsMax is ISO's Max15NumericText.
const countDigitsMax = 15

// count reads an OrgnlNbOfTxs (Max15NumericText); 0 when absent or not a
// count. Optional and informative only (a reader uses it to know whether a
// report names every payment), so one a bank writes otherwise reads as not
// given rather than refusing the statuses of the whole file.
func count(s string) int {
	s = strings.TrimSpace(s)
	if s == "" || len(s) > countDigitsMax {
		return 0
	}
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0
		}
		n = n*10 + int(c-'0')
	}
	return n
}

// parsePaymentInfoStatus reads the OrgnlPmtInfAndSts at path p and its
// payment statuses.
func parsePaymentInfoStatus(p string, x xmlOrgnlPmtInfAndSts) (PaymentInfoStatus, error) {
	var err error
	pi := PaymentInfoStatus{Path: p, OriginalPaymentInfoID: strings.TrimSpace(x.OrgnlPmtInfId), Status: strings.TrimSpace(x.PmtInfSts),
		OriginalTransactions: count(x.OrgnlNbOfTxs)}
	if err := required(p+"/OrgnlPmtInfId", pi.OriginalPaymentInfoID); err != nil {
		return pi, err
	}
	if err := checkStatus(p+"/PmtInfSts", pi.Status, true); err != nil {
		return pi, err
	}
	if pi.Reasons, err = reasons(p, x.StsRsnInf); err != nil {
		return pi, err
	}
	for j, t := range x.TxInfAndSts {
		ts, err := parseTransactionStatus(fmt.Sprintf("%s/TxInfAndSts[%d]", p, j), t)
		if err != nil {
			return pi, err
		}
		pi.Transactions = append(pi.Transactions, ts)
	}
	return pi, nil
}

// parseTransactionStatus reads the TxInfAndSts at path tp: an end-to-end id
// and a known status are required, and a rejection carries its reason.
func parseTransactionStatus(tp string, t xmlTxInfAndSts) (TransactionStatus, error) {
	var err error
	ts := TransactionStatus{Path: tp, OriginalEndToEndID: strings.TrimSpace(t.OrgnlEndToEndId),
		OriginalInstructionID: strings.TrimSpace(t.OrgnlInstrId), Status: strings.TrimSpace(t.TxSts)}
	if err := required(tp+"/OrgnlEndToEndId", ts.OriginalEndToEndID); err != nil {
		return ts, err
	}
	if err := required(tp+"/TxSts", ts.Status); err != nil {
		return ts, err
	}
	if err := checkStatus(tp+"/TxSts", ts.Status, false); err != nil {
		return ts, err
	}
	if ts.Reasons, err = reasons(tp, t.StsRsnInf); err != nil {
		return ts, err
	}
	if ts.Status == StatusRejected && len(ts.Reasons) == 0 {
		return ts, malformed(tp+"/StsRsnInf", "a rejected payment needs its reason")
	}
	return ts, nil
}
