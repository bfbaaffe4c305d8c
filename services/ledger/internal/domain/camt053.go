package domain

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/money"
)

// camt.053 (BankToCustomerStatement), versions 001.02 to 001.08: the
// elements a client-money statement needs. Element names in errors are paths
// under the document's BkToCstmrStmt, indexes 0-based.

type camtAmount struct {
	Ccy   string `xml:"Ccy,attr"`
	Value string `xml:",chardata"`
}

type camtDate struct {
	Dt   string `xml:"Dt"`
	DtTm string `xml:"DtTm"`
}

type camtBal struct {
	Tp struct {
		CdOrPrtry struct {
			Cd string `xml:"Cd"`
		} `xml:"CdOrPrtry"`
	} `xml:"Tp"`
	Amt       camtAmount `xml:"Amt"`
	CdtDbtInd string     `xml:"CdtDbtInd"`
	Dt        camtDate   `xml:"Dt"`
}

type camtStatus struct {
	Text string `xml:",chardata"` // 001.02: <Sts>BOOK</Sts>
	Cd   string `xml:"Cd"`        // 001.08: <Sts><Cd>BOOK</Cd></Sts>
}

func (s camtStatus) code() string {
	if c := strings.TrimSpace(s.Cd); c != "" {
		return c
	}
	return strings.TrimSpace(s.Text)
}

type camtEntry struct {
	NtryRef     string     `xml:"NtryRef"`
	Amt         camtAmount `xml:"Amt"`
	CdtDbtInd   string     `xml:"CdtDbtInd"`
	Sts         camtStatus `xml:"Sts"`
	BookgDt     camtDate   `xml:"BookgDt"`
	AcctSvcrRef string     `xml:"AcctSvcrRef"`
	TxDtls      []struct {
		Refs struct {
			EndToEndId string `xml:"EndToEndId"`
		} `xml:"Refs"`
		RmtInf struct {
			Ustrd []string `xml:"Ustrd"`
		} `xml:"RmtInf"`
	} `xml:"NtryDtls>TxDtls"`
}

type camtAcct struct {
	ID struct {
		IBAN string `xml:"IBAN"`
		Othr struct {
			ID string `xml:"Id"`
		} `xml:"Othr"`
	} `xml:"Id"`
	Ccy string `xml:"Ccy"`
}

// reference is what the reconciliation matches a line by: the end-to-end id
// the platform sent, else the bank's reference, else the entry's.
func (e camtEntry) reference() string {
	for _, t := range e.TxDtls {
		if r := strings.TrimSpace(t.Refs.EndToEndId); r != "" && r != "NOTPROVIDED" {
			return r
		}
	}
	if r := strings.TrimSpace(e.AcctSvcrRef); r != "" {
		return r
	}
	if r := strings.TrimSpace(e.NtryRef); r != "" {
		return r
	}
	for _, t := range e.TxDtls {
		if len(t.RmtInf.Ustrd) > 0 {
			return strings.TrimSpace(t.RmtInf.Ustrd[0])
		}
	}
	return ""
}

func camtSigned(cur money.Currency, a camtAmount, ind, where string) (decimal.Decimal, error) {
	if a.Ccy != cur.Code {
		return decimal.Decimal{}, stmtErr(where+"/Amt", "currency %q: the statement is imported as %s", a.Ccy, cur.Code)
	}
	v, err := cur.Parse(strings.TrimSpace(a.Value))
	if err != nil {
		return decimal.Decimal{}, stmtErr(where+"/Amt", "%s", err.Error())
	}
	if v.IsNegative() {
		return decimal.Decimal{}, stmtErr(where+"/Amt", "negative amount %s: the sign is CdtDbtInd's", a.Value)
	}
	switch strings.TrimSpace(ind) {
	case "CRDT":
		return v, nil
	case "DBIT":
		return v.Neg(), nil
	}
	return decimal.Decimal{}, stmtErr(where+"/CdtDbtInd", "%q: want CRDT or DBIT", ind)
}

// parseCamt053 reads the document's one Stmt: its id, account, opening
// (OPBD, else PRCD) and closing (CLBD) balances and its booked entries
// (pending ones do not move the booked balance and are left out).
func parseCamt053(cur money.Currency, content []byte) (*BankStatement, error) {
	dec := xml.NewDecoder(bytes.NewReader(content))
	at := func() string { l, _ := dec.InputPos(); return fmt.Sprintf(" (line %d)", l) }
	var (
		st         = &BankStatement{}
		stmts      int
		inStmt     bool
		opening    *decimal.Decimal
		closing    *decimal.Decimal
		closingDt  camtDate
		nBal, nEnt int
		sawRoot    bool
		accCcy     string
	)
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, stmtErr("XML"+at(), "%s", err.Error())
		}
		switch t := tok.(type) {
		case xml.StartElement:
			name := t.Name.Local
			if !sawRoot {
				sawRoot = true
				if name != "Document" || !strings.Contains(t.Name.Space, "camt.053") {
					return nil, stmtErr("Document"+at(), "root <%s xmlns=%q>: want a camt.053 Document", name, t.Name.Space)
				}
				continue
			}
			if !inStmt {
				if name == "Stmt" {
					if stmts++; stmts > 1 {
						return nil, stmtErr("Stmt[1]"+at(), "more than one statement in the document: import each on its own")
					}
					inStmt = true
				}
				continue
			}
			where := "Stmt/" + name
			line := at()
			switch name {
			case "Id":
				var s string
				if err := dec.DecodeElement(&s, &t); err != nil {
					return nil, stmtErr(where+line, "%s", err.Error())
				}
				st.ID = strings.TrimSpace(s)
			case "Acct":
				var a camtAcct
				if err := dec.DecodeElement(&a, &t); err != nil {
					return nil, stmtErr(where+line, "%s", err.Error())
				}
				st.Account = strings.TrimSpace(a.ID.IBAN)
				if st.Account == "" {
					st.Account = strings.TrimSpace(a.ID.Othr.ID)
				}
				accCcy = strings.TrimSpace(a.Ccy)
				if accCcy != "" && accCcy != cur.Code {
					return nil, stmtErr("Stmt/Acct/Ccy"+line, "account currency %s: the statement is imported as %s", accCcy, cur.Code)
				}
			case "Bal":
				where = fmt.Sprintf("Stmt/Bal[%d]", nBal)
				nBal++
				var b camtBal
				if err := dec.DecodeElement(&b, &t); err != nil {
					return nil, stmtErr(where+line, "%s", err.Error())
				}
				v, err := camtSigned(cur, b.Amt, b.CdtDbtInd, where)
				if err != nil {
					return nil, withLine(err, line)
				}
				switch strings.TrimSpace(b.Tp.CdOrPrtry.Cd) {
				case "OPBD":
					opening = &v
				case "PRCD":
					if opening == nil {
						opening = &v
					}
				case "CLBD":
					closing, closingDt = &v, b.Dt
					if strings.TrimSpace(b.Dt.Dt) == "" && strings.TrimSpace(b.Dt.DtTm) == "" {
						return nil, stmtErr(where+"/Dt"+line, "the closing balance has no date")
					}
				}
			case "Ntry":
				where = fmt.Sprintf("Stmt/Ntry[%d]", nEnt)
				nEnt++
				var e camtEntry
				if err := dec.DecodeElement(&e, &t); err != nil {
					return nil, stmtErr(where+line, "%s", err.Error())
				}
				if s := e.Sts.code(); s != "BOOK" {
					if s == "" {
						return nil, stmtErr(where+"/Sts"+line, "missing: want BOOK (or PDNG/INFO, which are left out)")
					}
					continue
				}
				v, err := camtSigned(cur, e.Amt, e.CdtDbtInd, where)
				if err != nil {
					return nil, withLine(err, line)
				}
				day, err := camtDay(e.BookgDt)
				if err != nil {
					return nil, stmtErr(where+"/BookgDt"+line, "%s", err.Error())
				}
				ref := e.reference()
				if err := checkReference(ref); err != nil {
					return nil, stmtErr(where+line, "%s", err.Error())
				}
				if len(st.Lines) >= statementLinesMax {
					return nil, stmtErr(where+line, "more than %d entries in one statement", statementLinesMax)
				}
				st.Lines = append(st.Lines, StatementLine{No: len(st.Lines) + 1, BookedOn: day, Reference: ref, Amount: v})
			default:
				if err := dec.Skip(); err != nil {
					return nil, stmtErr(where+line, "%s", err.Error())
				}
			}
		case xml.EndElement:
			if inStmt && t.Name.Local == "Stmt" {
				inStmt = false
			}
		}
	}
	switch {
	case !sawRoot:
		return nil, stmtErr("Document", "empty document: want a camt.053 Document")
	case stmts == 0:
		return nil, stmtErr("BkToCstmrStmt/Stmt", "missing: the document holds no statement")
	case opening == nil:
		return nil, stmtErr("Stmt/Bal", "no opening balance (Tp/CdOrPrtry/Cd OPBD or PRCD)")
	case closing == nil:
		return nil, stmtErr("Stmt/Bal", "no closing balance (Tp/CdOrPrtry/Cd CLBD)")
	}
	st.Opening, st.Closing = *opening, *closing
	bal := st.Opening
	for i := range st.Lines {
		bal = bal.Add(st.Lines[i].Amount)
		st.Lines[i].Balance = bal
	}
	if !bal.Equal(st.Closing) {
		return nil, stmtErr("Stmt/Bal[CLBD]", "closing balance %s, but the opening balance %s and the booked entries make %s", st.Closing, st.Opening, bal)
	}
	if dt := strings.TrimSpace(closingDt.DtTm); dt != "" {
		t, err := time.Parse(time.RFC3339, dt)
		if err != nil {
			return nil, stmtErr("Stmt/Bal[CLBD]/Dt/DtTm", "%q: want an RFC 3339 date-time with its offset", dt)
		}
		st.ClosingAt = t.UTC()
		y, m, d := st.ClosingAt.Date()
		st.Date = time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
	} else {
		day, err := parseDate(closingDt.Dt)
		if err != nil {
			return nil, stmtErr("Stmt/Bal[CLBD]/Dt/Dt", "%s", err.Error())
		}
		st.Date, st.ClosingAt = day, day.Add(24*time.Hour)
	}
	return st, nil
}

func camtDay(d camtDate) (time.Time, error) {
	switch {
	case strings.TrimSpace(d.Dt) != "":
		return parseDate(d.Dt)
	case strings.TrimSpace(d.DtTm) != "":
		return parseDate(d.DtTm)
	}
	return time.Time{}, errors.New("a booked entry needs its booking date")
}

func withLine(err error, line string) error {
	var se *StatementError
	if errors.As(err, &se) {
		return &StatementError{Where: se.Where + line, Reason: se.Reason}
	}
	return err
}
