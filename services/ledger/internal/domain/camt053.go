package domain

import (
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/iso20022"
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
func parseCamt053(cur money.Currency, content string) (*BankStatement, error) {
	lim := &camtDepthLimit{raw: xml.NewDecoder(strings.NewReader(content))}
	r := &camtReader{dec: xml.NewTokenDecoder(lim), raw: lim.raw, cur: cur, st: &BankStatement{}}
	for {
		tok, err := r.dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, stmtErr("XML"+r.at(), "%s", xmlReason(err))
		}
		switch t := tok.(type) {
		case xml.StartElement:
			if err := r.start(t); err != nil {
				return nil, err
			}
		case xml.EndElement:
			if r.inStmt && t.Name.Local == "Stmt" {
				r.inStmt = false
			}
		}
	}
	return r.finish()
}

// Camt053Currency is the currency a camt.053 states its one statement in:
// its account's (Stmt/Acct/Ccy), else its first balance's or entry's
// amount's (Amt/@Ccy). A statement read from the inbox has no importer to
// name it; parseCamt053 then refuses any amount in another.
func Camt053Currency(content string) (string, error) {
	lim := &camtDepthLimit{raw: xml.NewDecoder(strings.NewReader(content))}
	dec := xml.NewTokenDecoder(lim)
	at := func() string { l, _ := lim.raw.InputPos(); return fmt.Sprintf(" (line %d)", l) }
	root, inStmt := false, false
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return "", stmtErr("XML"+at(), "%s", xmlReason(err))
		}
		t, ok := tok.(xml.StartElement)
		switch {
		case !ok:
			continue
		case !root:
			root = true
			if t.Name.Local != "Document" || !strings.Contains(t.Name.Space, "camt.053") {
				return "", stmtErr("Document"+at(), "root <%s xmlns=%q>: want a camt.053 Document", t.Name.Local, t.Name.Space)
			}
			continue
		case !inStmt:
			inStmt = t.Name.Local == "Stmt"
			continue
		}
		where := "Stmt/" + t.Name.Local + at()
		var ccy string
		switch t.Name.Local {
		case "Acct":
			var a camtAcct
			err, ccy = dec.DecodeElement(&a, &t), a.Ccy
		case "Bal":
			var b camtBal
			err, ccy = dec.DecodeElement(&b, &t), b.Amt.Ccy
		case "Ntry":
			var e camtEntry
			err, ccy = dec.DecodeElement(&e, &t), e.Amt.Ccy
		default:
			err = dec.Skip()
		}
		if err != nil {
			return "", stmtErr(where, "%s", xmlReason(err))
		}
		if ccy = strings.TrimSpace(ccy); ccy != "" {
			return ccy, nil
		}
	}
	if !root {
		return "", stmtErr("Document", "no XML element: want a camt.053 Document")
	}
	return "", stmtErr("Stmt/Acct/Ccy", "no currency: neither the account nor an amount states one")
}

// camtDepthMax bounds how deep a camt.053's elements nest. A statement's
// deepest path (Document/BkToCstmrStmt/Stmt/Ntry/NtryDtls/TxDtls/
// RltdPties/Cdtr/Pty/PstlAdr/AdrLine) is 11 deep, its supplementary data
// a few more; the decoder keeps every open element (64 bytes and more of
// heap for each 3 bytes of "<a>": 1.4 GB for the 64 MiB a statement may
// be), wherever in the document they are.
const camtDepthMax = 64

// errCamtTooDeep refuses a document nested deeper than camtDepthMax.
var errCamtTooDeep = fmt.Errorf("nested deeper than %d elements", camtDepthMax)

// camtDepthLimit hands the document's tokens as they are (RawToken: the
// decoder reading through it matches and translates them, and keeps the
// open elements) until they nest deeper than camtDepthMax.
type camtDepthLimit struct {
	raw   *xml.Decoder
	depth int
}

func (l *camtDepthLimit) Token() (xml.Token, error) {
	t, err := l.raw.RawToken()
	switch t.(type) {
	case xml.StartElement:
		if l.depth++; l.depth > camtDepthMax {
			return nil, errCamtTooDeep
		}
	case xml.EndElement:
		l.depth--
	}
	return t, err
}

// xmlReason is err's text without the line a syntax error names: the
// decoder that finds a mismatched element reads tokens, not lines (the
// error's position is the reader's, at()).
func xmlReason(err error) string {
	var se *xml.SyntaxError
	if errors.As(err, &se) {
		return se.Msg
	}
	return err.Error()
}

// camtReader is parseCamt053's state while it walks the document.
type camtReader struct {
	dec        *xml.Decoder // reads through raw
	raw        *xml.Decoder // reads the bytes: where in them it is
	cur        money.Currency
	st         *BankStatement
	stmts      int
	inStmt     bool
	opening    *decimal.Decimal
	closing    *decimal.Decimal
	closingDt  camtDate
	nBal, nEnt int
	sawRoot    bool
}

// at names the decoder's line, for errors.
func (r *camtReader) at() string { l, _ := r.raw.InputPos(); return fmt.Sprintf(" (line %d)", l) }

// start handles one start element: the root, the Stmt, or an element of the Stmt.
func (r *camtReader) start(t xml.StartElement) error {
	name := t.Name.Local
	if !r.sawRoot {
		r.sawRoot = true
		if name != "Document" || !strings.Contains(t.Name.Space, "camt.053") {
			return stmtErr("Document"+r.at(), "root <%s xmlns=%q>: want a camt.053 Document", name, t.Name.Space)
		}
		return nil
	}
	if !r.inStmt {
		if name == "Stmt" {
			if r.stmts++; r.stmts > 1 {
				return stmtErr("Stmt[1]"+r.at(), "more than one statement in the document: import each on its own")
			}
			r.inStmt = true
		}
		return nil
	}
	where := "Stmt/" + name
	line := r.at()
	switch name {
	case "Id":
		var s string
		if err := r.dec.DecodeElement(&s, &t); err != nil {
			return stmtErr(where+line, "%s", xmlReason(err))
		}
		r.st.ID = strings.TrimSpace(s)
	case "Acct":
		return r.account(t, where, line)
	case "Bal":
		return r.balance(t, line)
	case "Ntry":
		return r.entry(t, line)
	default:
		if err := r.dec.Skip(); err != nil {
			return stmtErr(where+line, "%s", xmlReason(err))
		}
	}
	return nil
}

// account reads Stmt/Acct: the IBAN (else the other id) and its currency,
// which must be the import's.
func (r *camtReader) account(t xml.StartElement, where, line string) error {
	var a camtAcct
	if err := r.dec.DecodeElement(&a, &t); err != nil {
		return stmtErr(where+line, "%s", xmlReason(err))
	}
	r.st.Account = strings.TrimSpace(a.ID.IBAN)
	if r.st.Account == "" {
		r.st.Account = strings.TrimSpace(a.ID.Othr.ID)
	}
	if accCcy := strings.TrimSpace(a.Ccy); accCcy != "" && accCcy != r.cur.Code {
		return stmtErr("Stmt/Acct/Ccy"+line, "account currency %s: the statement is imported as %s", accCcy, r.cur.Code)
	}
	return nil
}

// balance reads one Stmt/Bal: the opening (OPBD, else PRCD) or the dated
// closing (CLBD) balance; other types are ignored.
func (r *camtReader) balance(t xml.StartElement, line string) error {
	where := fmt.Sprintf("Stmt/Bal[%d]", r.nBal)
	r.nBal++
	var b camtBal
	if err := r.dec.DecodeElement(&b, &t); err != nil {
		return stmtErr(where+line, "%s", xmlReason(err))
	}
	v, err := camtSigned(r.cur, b.Amt, b.CdtDbtInd, where)
	if err != nil {
		return withLine(err, line)
	}
	switch strings.TrimSpace(b.Tp.CdOrPrtry.Cd) {
	case "OPBD":
		r.opening = &v
	case "PRCD":
		if r.opening == nil {
			r.opening = &v
		}
	case "CLBD":
		r.closing, r.closingDt = &v, b.Dt
		if strings.TrimSpace(b.Dt.Dt) == "" && strings.TrimSpace(b.Dt.DtTm) == "" {
			return stmtErr(where+"/Dt"+line, "the closing balance has no date")
		}
	}
	return nil
}

// entry reads one Stmt/Ntry into a statement line if it is booked.
func (r *camtReader) entry(t xml.StartElement, line string) error {
	where := fmt.Sprintf("Stmt/Ntry[%d]", r.nEnt)
	r.nEnt++
	var e camtEntry
	if err := r.dec.DecodeElement(&e, &t); err != nil {
		return stmtErr(where+line, "%s", xmlReason(err))
	}
	if s := e.Sts.code(); s != "BOOK" {
		if s == "" {
			return stmtErr(where+"/Sts"+line, "missing: want BOOK (or PDNG/INFO, which are left out)")
		}
		return nil
	}
	v, err := camtSigned(r.cur, e.Amt, e.CdtDbtInd, where)
	if err != nil {
		return withLine(err, line)
	}
	day, err := camtDay(e.BookgDt)
	if err != nil {
		return stmtErr(where+"/BookgDt"+line, "%s", err.Error())
	}
	ref := e.reference()
	if err := checkReference(ref); err != nil {
		return stmtErr(where+line, "%s", xmlReason(err))
	}
	if len(r.st.Lines) >= statementLinesMax {
		return stmtErr(where+line, "more than %d entries in one statement", statementLinesMax)
	}
	r.st.Lines = append(r.st.Lines, StatementLine{No: len(r.st.Lines) + 1, BookedOn: day, Reference: ref, Amount: v})
	return nil
}

// finish checks the statement is whole (one Stmt, both balances), that the
// entries take the opening balance to the closing one, and dates it by its
// closing balance.
func (r *camtReader) finish() (*BankStatement, error) {
	st := r.st
	switch {
	case !r.sawRoot:
		return nil, stmtErr("Document", "empty document: want a camt.053 Document")
	case r.stmts == 0:
		return nil, stmtErr("BkToCstmrStmt/Stmt", "missing: the document holds no statement")
	case r.opening == nil:
		return nil, stmtErr("Stmt/Bal", "no opening balance (Tp/CdOrPrtry/Cd OPBD or PRCD)")
	case r.closing == nil:
		return nil, stmtErr("Stmt/Bal", "no closing balance (Tp/CdOrPrtry/Cd CLBD)")
	}
	st.Opening, st.Closing = *r.opening, *r.closing
	bal := st.Opening
	for i := range st.Lines {
		bal = bal.Add(st.Lines[i].Amount)
		st.Lines[i].Balance = bal
	}
	if !bal.Equal(st.Closing) {
		return nil, stmtErr("Stmt/Bal[CLBD]", "closing balance %s, but the opening balance %s and the booked entries make %s", st.Closing, st.Opening, bal)
	}
	if dt := strings.TrimSpace(r.closingDt.DtTm); dt != "" {
		t, ok := iso20022.ParseDateTime(dt)
		if !ok {
			return nil, stmtErr("Stmt/Bal[CLBD]/Dt/DtTm", "%q: want an ISO date-time (with its offset, or read as UTC)", dt)
		}
		st.ClosingAt = t.UTC()
		y, m, d := st.ClosingAt.Date()
		st.Date = time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
	} else {
		day, err := parseDate(r.closingDt.Dt)
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
