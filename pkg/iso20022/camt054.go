package iso20022

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/shopspring/decimal"
)

// Entry statuses and credit/debit indicators of camt.05x.
const (
	EntryBooked  = "BOOK"
	EntryPending = "PDNG"
	EntryInfo    = "INFO"
	EntryFuture  = "FUTR"
	Credit       = "CRDT"
	Debit        = "DBIT"
)

// Notification is a parsed camt.054 (bank to customer debit/credit notification).
type Notification struct {
	MessageID string
	CreatedAt time.Time
	Accounts  []AccountNotification
}

// AccountNotification is one Ntfctn: an account and its entries.
type AccountNotification struct {
	ID       string
	Account  string // IBAN or Othr/Id
	Currency string
	Entries  []Entry
	// Unreadable are the entries Parse refused, each its error naming
	// the element: set aside, not refusing the file, so that one
	// malformed entry (another account's, a deposit) does not keep the
	// others from being read. What to do with them is the reader's.
	Unreadable []*MalformedError
}

// Entry is one Ntry, a movement on the account (camt.053 statements and
// camt.054 notifications share it).
type Entry struct {
	Path         string
	Reference    string // NtryRef
	Amount       decimal.Decimal
	Currency     string
	CreditDebit  string // CRDT or DBIT
	Reversal     bool
	Status       string // BOOK, PDNG, INFO, FUTR
	BookingDate  time.Time
	ValueDate    time.Time
	BankRef      string // AcctSvcrRef
	Transactions []EntryTransaction
}

// EntryTransaction is one TxDtls of an entry: the references that match it
// to a payment, and any return information.
type EntryTransaction struct {
	Path          string
	EndToEndID    string
	InstructionID string
	MessageID     string
	PmtInfID      string
	Amount        decimal.Decimal // the entry's amount when the entry has one transaction and no TxDtls/Amt
	Currency      string
	CreditDebit   string
	Return        *Reason // RtrInf: the payment came back, with the bank's reason
}

type xmlCamt054In struct {
	Ntf struct {
		GrpHdr struct {
			MsgId   string `xml:"MsgId"`
			CreDtTm string `xml:"CreDtTm"`
		} `xml:"GrpHdr"`
		Ntfctn []struct {
			Id   string     `xml:"Id"`
			Acct xmlAccount `xml:"Acct"`
			Ntry []XMLEntry `xml:"Ntry"`
		} `xml:"Ntfctn"`
	} `xml:"BkToCstmrDbtCdtNtfctn"`
}

// XMLEntry is Ntry as camt.052/053/054 carry it, for this package's
// parsers (Parse turns it into an Entry).
type XMLEntry struct {
	NtryRef     string      `xml:"NtryRef"`
	Amt         *Amount     `xml:"Amt"`
	CdtDbtInd   string      `xml:"CdtDbtInd"`
	RvslInd     string      `xml:"RvslInd"`
	Sts         xmlSts      `xml:"Sts"`
	BookgDt     *DateChoice `xml:"BookgDt"`
	ValDt       *DateChoice `xml:"ValDt"`
	AcctSvcrRef string      `xml:"AcctSvcrRef"`
	NtryDtls    []struct {
		TxDtls []struct {
			Refs struct {
				MsgId      string `xml:"MsgId"`
				PmtInfId   string `xml:"PmtInfId"`
				InstrId    string `xml:"InstrId"`
				EndToEndId string `xml:"EndToEndId"`
			} `xml:"Refs"`
			Amt       *Amount `xml:"Amt"`
			CdtDbtInd string  `xml:"CdtDbtInd"`
			AmtDtls   struct {
				TxAmt struct {
					Amt *Amount `xml:"Amt"`
				} `xml:"TxAmt"`
			} `xml:"AmtDtls"`
			RtrInf *struct {
				Rsn      *xmlReasonChoice `xml:"Rsn"`
				AddtlInf []string         `xml:"AddtlInf"`
			} `xml:"RtrInf"`
		} `xml:"TxDtls"`
	} `xml:"NtryDtls"`
}

// xmlSts is Sts: a plain code (camt v02) or Cd/Prtry (v08).
type xmlSts struct {
	Text  string `xml:",chardata"`
	Cd    string `xml:"Cd"`
	Prtry string `xml:"Prtry"`
}

func (s xmlSts) code() string {
	if c := strings.TrimSpace(s.Cd); c != "" {
		return c
	}
	if c := strings.TrimSpace(s.Prtry); c != "" {
		return c
	}
	return strings.TrimSpace(s.Text)
}

// Parse checks an entry and returns it.
func (x XMLEntry) Parse(path string) (Entry, error) {
	e := Entry{Path: path, Reference: strings.TrimSpace(x.NtryRef), CreditDebit: strings.TrimSpace(x.CdtDbtInd),
		Status: x.Sts.code(), BankRef: strings.TrimSpace(x.AcctSvcrRef)}
	var err error
	if e.Reversal, err = xsBoolean(x.RvslInd); err != nil {
		return e, malformed(path+"/RvslInd", "%s", err.Error())
	}
	if e.Amount, e.Currency, err = x.Amt.parse(path + "/Amt"); err != nil {
		return e, err
	}
	if e.CreditDebit != Credit && e.CreditDebit != Debit {
		return e, malformed(path+"/CdtDbtInd", "want CRDT or DBIT, got %q", clip(e.CreditDebit))
	}
	switch e.Status {
	case EntryBooked, EntryPending, EntryInfo, EntryFuture:
	case "":
		return e, malformed(path+"/Sts", "required")
	default:
		return e, malformed(path+"/Sts", "want BOOK, PDNG, INFO or FUTR, got %q", clip(e.Status))
	}
	if e.BookingDate, err = x.BookgDt.parse(path + "/BookgDt"); err != nil {
		return e, err
	}
	if e.ValueDate, err = x.ValDt.parse(path + "/ValDt"); err != nil {
		return e, err
	}
	if e.Status == EntryBooked && e.BookingDate.IsZero() {
		return e, malformed(path+"/BookgDt", "a booked entry needs its booking date")
	}
	for i, d := range x.NtryDtls {
		for j, t := range d.TxDtls {
			tp := fmt.Sprintf("%s/NtryDtls[%d]/TxDtls[%d]", path, i, j)
			et := EntryTransaction{Path: tp, EndToEndID: strings.TrimSpace(t.Refs.EndToEndId), InstructionID: strings.TrimSpace(t.Refs.InstrId),
				MessageID: strings.TrimSpace(t.Refs.MsgId), PmtInfID: strings.TrimSpace(t.Refs.PmtInfId), CreditDebit: strings.TrimSpace(t.CdtDbtInd)}
			switch {
			case t.Amt != nil:
				if et.Amount, et.Currency, err = t.Amt.parse(tp + "/Amt"); err != nil {
					return e, err
				}
			case t.AmtDtls.TxAmt.Amt != nil:
				if et.Amount, et.Currency, err = t.AmtDtls.TxAmt.Amt.parse(tp + "/AmtDtls/TxAmt/Amt"); err != nil {
					return e, err
				}
			}
			if et.CreditDebit == "" {
				et.CreditDebit = e.CreditDebit
			} else if et.CreditDebit != Credit && et.CreditDebit != Debit {
				return e, malformed(tp+"/CdtDbtInd", "want CRDT or DBIT, got %q", clip(et.CreditDebit))
			}
			if t.RtrInf != nil {
				// Rsn is optional (0..1): without it the code is "", the
				// bank's AddtlInf all it says.
				r, err := t.RtrInf.Rsn.reason(tp+"/RtrInf/Rsn", t.RtrInf.AddtlInf)
				if err != nil {
					return e, err
				}
				et.Return = &r
			}
			e.Transactions = append(e.Transactions, et)
		}
	}
	if len(e.Transactions) == 1 && e.Transactions[0].Currency == "" {
		e.Transactions[0].Amount, e.Transactions[0].Currency = e.Amount, e.Currency
	}
	for _, t := range e.Transactions {
		if t.Currency == "" {
			return e, malformed(t.Path+"/Amt", "required when an entry holds several transactions")
		}
	}
	return e, nil
}

// ParseCamt054 reads a camt.054 strictly: group header, each
// notification's account, and each entry (amount and currency, credit or
// debit, status, a booking date when booked, transaction references and
// return reasons). A malformed header or account refuses the file; a
// malformed entry is set aside in its account's Unreadable, the others
// read.
func ParseCamt054(b []byte) (Notification, error) {
	k, err := Detect(b)
	if err != nil {
		return Notification{}, err
	}
	if k.Family() != FamilyCamt054 {
		return Notification{}, malformed("Document", "want a camt.054, got %s", k)
	}
	var doc xmlCamt054In
	if err := unmarshal(b, &doc); err != nil {
		return Notification{}, err
	}
	const root = "BkToCstmrDbtCdtNtfctn"
	n := doc.Ntf
	out := Notification{MessageID: strings.TrimSpace(n.GrpHdr.MsgId)}
	if err := required(root+"/GrpHdr/MsgId", out.MessageID); err != nil {
		return out, err
	}
	if out.CreatedAt, err = parseDateTime(root+"/GrpHdr/CreDtTm", n.GrpHdr.CreDtTm); err != nil {
		return out, err
	}
	if len(n.Ntfctn) == 0 {
		return out, malformed(root+"/Ntfctn", "at least one required")
	}
	for i, x := range n.Ntfctn {
		p := fmt.Sprintf("%s/Ntfctn[%d]", root, i)
		an := AccountNotification{ID: strings.TrimSpace(x.Id), Account: x.Acct.id(), Currency: x.Acct.Ccy}
		if err := required(p+"/Id", an.ID); err != nil {
			return out, err
		}
		if err := required(p+"/Acct/Id", an.Account); err != nil {
			return out, err
		}
		for j, xe := range x.Ntry {
			e, err := xe.Parse(fmt.Sprintf("%s/Ntry[%d]", p, j))
			var me *MalformedError
			switch {
			case errors.As(err, &me):
				an.Unreadable = append(an.Unreadable, me)
			case err != nil:
				return out, err
			default:
				an.Entries = append(an.Entries, e)
			}
		}
		out.Accounts = append(out.Accounts, an)
	}
	return out, nil
}

// xsBoolean reads an optional xs:boolean, absent being false: "1" and "0"
// are as valid as "true" and "false" (a bank writing "1" had its reversal
// read as none), anything else is refused rather than taken as false.
func xsBoolean(s string) (bool, error) {
	switch strings.TrimSpace(s) {
	case "true", "1":
		return true, nil
	case "false", "0", "":
		return false, nil
	}
	return false, fmt.Errorf("want true, false, 1 or 0, got %q", clip(s))
}
