package iso20022

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/money"
)

// Field limits of pain.001 (Max35Text, Max140Text, Max34Text, Max15NumericText).
const (
	idLenMax      = 35
	nameLenMax    = 140
	accountLenMax = 34
	remitLenMax   = 140
	fractionMax   = 5 // ActiveOrHistoricCurrencyAndAmount: at most 5 fraction digits
	// amountDigitsMax: an amount (InstdAmt) and a control sum (CtrlSum) are
	// the schema's decimal of totalDigits 18; a bank refuses a file with
	// a longer one.
	amountDigitsMax = 18
)

// AmountFits reports whether d, written with fraction digits after the
// point (as a pain.001 writes it), fits ISO 20022's 18 digits.
func AmountFits(d decimal.Decimal, fraction int32) bool {
	return len(strings.TrimPrefix(strings.ReplaceAll(d.StringFixed(fraction), ".", ""), "-")) <= amountDigitsMax
}

var (
	ibanRE  = regexp.MustCompile(`^[A-Z]{2}[0-9]{2}[a-zA-Z0-9]{1,30}$`)
	bicRE   = regexp.MustCompile(`^[A-Z0-9]{4}[A-Z]{2}[A-Z0-9]{2}([A-Z0-9]{3})?$`)
	countRE = regexp.MustCompile(`^[0-9]{1,15}$`)
)

// IsBIC reports whether s is a BIC (BICFIDec2014Identifier).
func IsBIC(s string) bool { return bicRE.MatchString(s) }

// IsIBAN reports whether s has an IBAN's shape (country, check digits,
// BBAN); the check digits themselves are the bank's to verify.
func IsIBAN(s string) bool { return ibanRE.MatchString(s) }

// Party is a debtor or creditor with its account and its bank (agent).
// Account is an IBAN when it has an IBAN's shape, else a domestic account
// number (Othr/Id); Agent is a BIC when it has a BIC's shape, else a
// clearing-system member id (a domestic bank code, e.g. a CNAPS number).
type Party struct {
	Name    string
	Account string
	Agent   string
}

// CreditTransfer is one payment of a batch.
type CreditTransfer struct {
	EndToEndID    string // the payer's reference, echoed by the bank in every report
	Amount        decimal.Decimal
	Currency      string
	ExecutionDate time.Time // the date the debtor's bank is to execute it (ReqdExctnDt)
	Creditor      Party
	Remittance    string // unstructured remittance information, optional
}

// CreditTransferBatch is one pain.001 message: every transfer is debited
// from Debtor's account; the builder groups them into one PmtInf per
// currency and execution date.
type CreditTransferBatch struct {
	MessageID       string
	CreatedAt       time.Time
	InitiatingParty string // the name the bank knows the sender by
	Debtor          Party
	Transfers       []CreditTransfer
}

// pain.001.001.09 as written (element order is the schema's).
type xmlPain001Doc struct {
	XMLName xml.Name          `xml:"urn:iso:std:iso:20022:tech:xsd:pain.001.001.09 Document"`
	Init    xmlCstmrCdtTrfIni `xml:"CstmrCdtTrfInitn"`
}

// xmlPain001In reads any supported pain.001 (namespace checked by Detect).
type xmlPain001In struct {
	XMLName xml.Name          `xml:"Document"`
	Init    xmlCstmrCdtTrfIni `xml:"CstmrCdtTrfInitn"`
}

type xmlCstmrCdtTrfIni struct {
	GrpHdr xmlGrpHdr   `xml:"GrpHdr"`
	PmtInf []xmlPmtInf `xml:"PmtInf"`
}

type xmlGrpHdr struct {
	MsgId    string   `xml:"MsgId"`
	CreDtTm  string   `xml:"CreDtTm"`
	NbOfTxs  string   `xml:"NbOfTxs"`
	CtrlSum  string   `xml:"CtrlSum,omitempty"`
	InitgPty xmlParty `xml:"InitgPty"`
}

type xmlParty struct {
	Nm string `xml:"Nm,omitempty"`
}

type xmlPmtInf struct {
	PmtInfId    string        `xml:"PmtInfId"`
	PmtMtd      string        `xml:"PmtMtd"`
	BtchBookg   string        `xml:"BtchBookg,omitempty"`
	NbOfTxs     string        `xml:"NbOfTxs,omitempty"`
	CtrlSum     string        `xml:"CtrlSum,omitempty"`
	ReqdExctnDt DateChoice    `xml:"ReqdExctnDt"`
	Dbtr        xmlParty      `xml:"Dbtr"`
	DbtrAcct    xmlAccount    `xml:"DbtrAcct"`
	DbtrAgt     xmlAgent      `xml:"DbtrAgt"`
	ChrgBr      string        `xml:"ChrgBr,omitempty"`
	CdtTrfTxInf []xmlCdtTrfTx `xml:"CdtTrfTxInf"`
}

type xmlAccount struct {
	Id  xmlAccountID `xml:"Id"`
	Ccy string       `xml:"Ccy,omitempty"`
}

type xmlAccountID struct {
	IBAN string     `xml:"IBAN,omitempty"`
	Othr *xmlOthrID `xml:"Othr,omitempty"`
}

type xmlOthrID struct {
	Id string `xml:"Id"`
}

type xmlAgent struct {
	FinInstnId xmlFinInstnId `xml:"FinInstnId"`
}

type xmlFinInstnId struct {
	BICFI       string        `xml:"BICFI,omitempty"`
	ClrSysMmbId *xmlClrSysMmb `xml:"ClrSysMmbId,omitempty"`
}

type xmlClrSysMmb struct {
	MmbId string `xml:"MmbId"`
}

type xmlCdtTrfTx struct {
	PmtId    xmlPmtId   `xml:"PmtId"`
	Amt      xmlAmt     `xml:"Amt"`
	CdtrAgt  *xmlAgent  `xml:"CdtrAgt,omitempty"`
	Cdtr     xmlParty   `xml:"Cdtr"`
	CdtrAcct xmlAccount `xml:"CdtrAcct"`
	RmtInf   *xmlRmtInf `xml:"RmtInf,omitempty"`
}

type xmlPmtId struct {
	InstrId    string `xml:"InstrId,omitempty"`
	EndToEndId string `xml:"EndToEndId"`
}

type xmlAmt struct {
	InstdAmt *Amount `xml:"InstdAmt"`
}

type xmlRmtInf struct {
	Ustrd string `xml:"Ustrd"`
}

func account(s string) xmlAccount {
	if IsIBAN(s) {
		return xmlAccount{Id: xmlAccountID{IBAN: s}}
	}
	return xmlAccount{Id: xmlAccountID{Othr: &xmlOthrID{Id: s}}}
}

func agent(s string) xmlAgent {
	if IsBIC(s) {
		return xmlAgent{FinInstnId: xmlFinInstnId{BICFI: s}}
	}
	return xmlAgent{FinInstnId: xmlFinInstnId{ClrSysMmbId: &xmlClrSysMmb{MmbId: s}}}
}

// checkText refuses what the schema would: empty, too long, or characters
// XML cannot carry.
func checkText(field, s string, lenMax int) error {
	if strings.TrimSpace(s) == "" {
		return fmt.Errorf("%s: required", field)
	}
	if utf8.RuneCountInString(s) > lenMax {
		return fmt.Errorf("%s: %d characters, at most %d", field, utf8.RuneCountInString(s), lenMax)
	}
	if !utf8.ValidString(s) || strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 && r != '\t' && r != '\n' && r != '\r' }) {
		return fmt.Errorf("%s: characters XML cannot carry", field)
	}
	return nil
}

// checkID refuses an identifier a bank would not echo back intact: blank
// at either end, over 35 characters, several lines.
func checkID(field, s string) error {
	if err := checkText(field, s, idLenMax); err != nil {
		return err
	}
	if !max35RE.MatchString(s) {
		return fmt.Errorf("%s: one line without leading or trailing blanks", field)
	}
	return nil
}

func checkParty(field string, p Party) error {
	if err := checkText(field+".name", p.Name, nameLenMax); err != nil {
		return err
	}
	if err := checkText(field+".account", p.Account, accountLenMax); err != nil {
		return err
	}
	return checkText(field+".agent", p.Agent, idLenMax)
}

// ClipName cuts a name to the 140 characters a party name may have.
func ClipName(s string) string {
	s = strings.TrimSpace(s)
	if utf8.RuneCountInString(s) <= nameLenMax {
		return s
	}
	return string([]rune(s)[:nameLenMax])
}

type groupKey struct {
	ccy  string
	date string
}

// BuildPain001 writes the batch as pain.001.001.09: one PmtInf per
// currency and execution date (in that order), NbOfTxs and CtrlSum at
// group and PmtInf level, each transfer's amount at its currency's minor
// unit. It refuses a batch the bank would: no transfers, a duplicate
// EndToEndId, an amount not positive or finer than its currency, a field
// over its length.
func BuildPain001(b CreditTransferBatch) ([]byte, error) {
	groups, err := checkBatch(b)
	if err != nil {
		return nil, err
	}
	doc := xmlPain001Doc{Init: xmlCstmrCdtTrfIni{GrpHdr: xmlGrpHdr{
		MsgId:    b.MessageID,
		CreDtTm:  b.CreatedAt.UTC().Truncate(time.Second).Format(time.RFC3339),
		NbOfTxs:  strconv.Itoa(len(b.Transfers)),
		InitgPty: xmlParty{Nm: b.InitiatingParty},
	}}}
	total, minorMax := decimal.Zero, int32(0)
	for _, k := range sortedGroupKeys(groups) {
		cur := money.MustLookup(k.ccy)
		minorMax = max(minorMax, cur.MinorUnits)
		pi, sum := paymentInfo(b, k, cur, groups[k])
		total = total.Add(sum)
		doc.Init.PmtInf = append(doc.Init.PmtInf, pi)
	}
	// The group's control sum adds amounts of every currency, as the
	// schema defines it (a plain sum of the instructed amounts).
	// Each PmtInf's control sum is at most this one, at no more fraction
	// digits: it fits when this one does.
	if !AmountFits(total, minorMax) {
		return nil, fmt.Errorf("batch %s: control sum %s over ISO 20022's %d digits: split the batch", b.MessageID, total.StringFixed(minorMax), amountDigitsMax)
	}
	doc.Init.GrpHdr.CtrlSum = total.StringFixed(minorMax)
	var buf bytes.Buffer
	buf.WriteString(xml.Header)
	enc := xml.NewEncoder(&buf)
	enc.Indent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return nil, fmt.Errorf("batch %s: %w", b.MessageID, err)
	}
	buf.WriteByte('\n')
	return buf.Bytes(), nil
}

// checkBatch refuses a batch the bank would refuse and groups its transfers
// by currency and execution date (currency codes canonical).
func checkBatch(b CreditTransferBatch) (map[groupKey][]CreditTransfer, error) {
	if err := checkID("message_id", b.MessageID); err != nil {
		return nil, err
	}
	if err := checkText("initiating_party", b.InitiatingParty, nameLenMax); err != nil {
		return nil, err
	}
	if err := checkParty("debtor", b.Debtor); err != nil {
		return nil, err
	}
	if len(b.Transfers) == 0 {
		return nil, fmt.Errorf("batch %s: no transfers", b.MessageID)
	}
	seen := make(map[string]bool, len(b.Transfers))
	groups := map[groupKey][]CreditTransfer{}
	for i, t := range b.Transfers {
		f := fmt.Sprintf("transfers[%d]", i)
		if err := checkID(f+".end_to_end_id", t.EndToEndID); err != nil {
			return nil, err
		}
		if seen[t.EndToEndID] {
			return nil, fmt.Errorf("%s: end-to-end id %s twice in one batch", f, t.EndToEndID)
		}
		seen[t.EndToEndID] = true
		cur, err := checkTransfer(f, t)
		if err != nil {
			return nil, err
		}
		t.Currency = cur.Code
		k := groupKey{cur.Code, t.ExecutionDate.Format(time.DateOnly)}
		groups[k] = append(groups[k], t)
	}
	return groups, nil
}

// CheckCreditTransfer is what BuildPain001 refuses of one transfer (its
// currency, amount, date, creditor and remittance): a batch leaves such a
// transfer out rather than fail whole.
func CheckCreditTransfer(t CreditTransfer) error {
	_, err := checkTransfer("transfer "+t.EndToEndID, t)
	return err
}

// checkTransfer checks one transfer's currency, amount, date, creditor and
// remittance; f names it in errors.
func checkTransfer(f string, t CreditTransfer) (money.Currency, error) {
	cur, err := money.Lookup(t.Currency)
	if err != nil || !ccyRE.MatchString(cur.Code) || cur.MinorUnits > fractionMax {
		return cur, fmt.Errorf("%s: currency %q is not an ISO 4217 currency a bank transfer carries", f, t.Currency)
	}
	if !t.Amount.IsPositive() || !cur.Round(t.Amount).Equal(t.Amount) {
		return cur, fmt.Errorf("%s: amount %s %s must be positive and in whole %s minor units", f, t.Amount, cur.Code, cur.Code)
	}
	if !AmountFits(t.Amount, cur.MinorUnits) {
		return cur, fmt.Errorf("%s: amount %s %s over ISO 20022's %d digits", f, cur.Format(t.Amount), cur.Code, amountDigitsMax)
	}
	if t.ExecutionDate.IsZero() {
		return cur, fmt.Errorf("%s: execution date required", f)
	}
	if err := checkParty(f+".creditor", t.Creditor); err != nil {
		return cur, err
	}
	if t.Remittance != "" {
		if err := checkText(f+".remittance", t.Remittance, remitLenMax); err != nil {
			return cur, err
		}
	}
	return cur, nil
}

// sortedGroupKeys orders the PmtInf groups by currency, then execution date.
func sortedGroupKeys(groups map[groupKey][]CreditTransfer) []groupKey {
	keys := make([]groupKey, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].ccy != keys[j].ccy {
			return keys[i].ccy < keys[j].ccy
		}
		return keys[i].date < keys[j].date
	})
	return keys
}

// paymentInfo writes one group's PmtInf, its transfers by EndToEndId, and
// returns it with the sum of its amounts.
func paymentInfo(b CreditTransferBatch, k groupKey, cur money.Currency, ts []CreditTransfer) (xmlPmtInf, decimal.Decimal) {
	sort.Slice(ts, func(i, j int) bool { return ts[i].EndToEndID < ts[j].EndToEndID })
	sum := decimal.Zero
	pi := xmlPmtInf{
		PmtInfId:    pmtInfID(b.MessageID, k),
		PmtMtd:      "TRF",
		BtchBookg:   "false", // one debit per transfer: each payout is booked, and returned, on its own
		NbOfTxs:     strconv.Itoa(len(ts)),
		ReqdExctnDt: DateChoice{Dt: k.date},
		Dbtr:        xmlParty{Nm: b.Debtor.Name},
		DbtrAcct:    account(b.Debtor.Account),
		DbtrAgt:     agent(b.Debtor.Agent),
		ChrgBr:      "SHAR",
	}
	for _, t := range ts {
		sum = sum.Add(t.Amount)
		ag := agent(t.Creditor.Agent)
		tx := xmlCdtTrfTx{
			PmtId:    xmlPmtId{InstrId: t.EndToEndID, EndToEndId: t.EndToEndID},
			Amt:      xmlAmt{InstdAmt: &Amount{Ccy: k.ccy, Value: cur.Format(t.Amount)}},
			CdtrAgt:  &ag,
			Cdtr:     xmlParty{Nm: t.Creditor.Name},
			CdtrAcct: account(t.Creditor.Account),
		}
		if t.Remittance != "" {
			tx.RmtInf = &xmlRmtInf{Ustrd: t.Remittance}
		}
		pi.CdtTrfTxInf = append(pi.CdtTrfTxInf, tx)
	}
	pi.CtrlSum = sum.StringFixed(cur.MinorUnits)
	return pi, sum
}

// PaymentInfoID is the PmtInfId BuildPain001 gives the transfers of a
// currency and execution date.
func PaymentInfoID(msgID, currency string, date time.Time) string {
	return pmtInfID(msgID, groupKey{currency, date.Format(time.DateOnly)})
}

// pmtInfID names a PmtInf: the message id, currency and date (≤ 35
// characters for a message id of up to 22).
func pmtInfID(msgID string, k groupKey) string {
	id := msgID + "-" + k.ccy + "-" + strings.ReplaceAll(k.date, "-", "")
	if len(id) > idLenMax {
		id = id[len(id)-idLenMax:]
	}
	return id
}

// Pain001 is a parsed credit transfer initiation.
type Pain001 struct {
	MessageID       string
	CreatedAt       time.Time
	NumberOfTxs     int
	ControlSum      decimal.Decimal
	InitiatingParty string
	PaymentInfos    []PaymentInfo
}

// PaymentInfo is one PmtInf: the debtor side shared by its transfers.
type PaymentInfo struct {
	ID            string
	Method        string
	NumberOfTxs   int
	ControlSum    decimal.Decimal
	ExecutionDate time.Time
	Debtor        Party
	ChargeBearer  string
	Transfers     []CreditTransfer
}

// ParsePain001 reads a pain.001 strictly: every element a bank needs is
// present and well-formed, and the control sums (NbOfTxs, CtrlSum) agree
// with the transfers at group and PmtInf level.
func ParsePain001(b []byte) (Pain001, error) {
	k, err := Detect(b)
	if err != nil {
		return Pain001{}, err
	}
	if k.Family() != FamilyPain001 {
		return Pain001{}, malformed("Document", "want a pain.001, got %s", k)
	}
	var doc xmlPain001In
	if err := unmarshal(b, &doc); err != nil {
		return Pain001{}, err
	}
	in := doc.Init
	const g = "CstmrCdtTrfInitn/GrpHdr"
	out := Pain001{MessageID: in.GrpHdr.MsgId, InitiatingParty: in.GrpHdr.InitgPty.Nm}
	if err := parseGroupHeader(g, in.GrpHdr, &out); err != nil {
		return out, err
	}
	if len(in.PmtInf) == 0 {
		return out, malformed("CstmrCdtTrfInitn/PmtInf", "at least one required")
	}
	n, total := 0, decimal.Zero
	e2e := map[string]string{}
	for i, x := range in.PmtInf {
		pi, sum, err := parsePaymentInfo(fmt.Sprintf("CstmrCdtTrfInitn/PmtInf[%d]", i), x, e2e)
		if err != nil {
			return out, err
		}
		n += len(pi.Transfers)
		total = total.Add(sum)
		out.PaymentInfos = append(out.PaymentInfos, pi)
	}
	if out.NumberOfTxs != n {
		return out, malformed(g+"/NbOfTxs", "says %d, the message holds %d", out.NumberOfTxs, n)
	}
	if in.GrpHdr.CtrlSum != "" && !out.ControlSum.Equal(total) {
		return out, malformed(g+"/CtrlSum", "says %s, the transfers add up to %s", out.ControlSum, total)
	}
	return out, nil
}

// parseGroupHeader checks the group header at path g and reads its creation
// time, count and control sum into out.
func parseGroupHeader(g string, h xmlGrpHdr, out *Pain001) error {
	var err error
	if !max35RE.MatchString(h.MsgId) {
		return malformed(g+"/MsgId", "want 1 to 35 characters")
	}
	if out.CreatedAt, err = parseDateTime(g+"/CreDtTm", h.CreDtTm); err != nil {
		return err
	}
	if out.NumberOfTxs, err = parseCount(g+"/NbOfTxs", h.NbOfTxs); err != nil {
		return err
	}
	if h.CtrlSum != "" {
		if out.ControlSum, _, err = (&Amount{Ccy: "XXX", Value: h.CtrlSum}).parse(g + "/CtrlSum"); err != nil {
			return err
		}
	}
	return nil
}

// parsePaymentInfo reads the PmtInf at path p and returns it with the sum of
// its transfers; its NbOfTxs and CtrlSum, when given, must agree. e2e holds
// the EndToEndIds seen so far in the message (id → path).
func parsePaymentInfo(p string, x xmlPmtInf, e2e map[string]string) (PaymentInfo, decimal.Decimal, error) {
	var err error
	pi := PaymentInfo{ID: x.PmtInfId, Method: x.PmtMtd, ChargeBearer: x.ChrgBr,
		Debtor: Party{Name: x.Dbtr.Nm, Account: x.DbtrAcct.id(), Agent: x.DbtrAgt.id()}}
	if !max35RE.MatchString(x.PmtInfId) {
		return pi, decimal.Zero, malformed(p+"/PmtInfId", "want 1 to 35 characters")
	}
	if x.PmtMtd != "TRF" {
		return pi, decimal.Zero, malformed(p+"/PmtMtd", "want TRF, got %q", x.PmtMtd)
	}
	if pi.ExecutionDate, err = x.ReqdExctnDt.parse(p + "/ReqdExctnDt"); err != nil {
		return pi, decimal.Zero, err
	}
	if pi.ExecutionDate.IsZero() {
		return pi, decimal.Zero, malformed(p+"/ReqdExctnDt", "required")
	}
	for _, f := range []struct{ path, v string }{{"/Dbtr/Nm", pi.Debtor.Name}, {"/DbtrAcct/Id", pi.Debtor.Account}, {"/DbtrAgt/FinInstnId", pi.Debtor.Agent}} {
		if err := required(p+f.path, f.v); err != nil {
			return pi, decimal.Zero, err
		}
	}
	if len(x.CdtTrfTxInf) == 0 {
		return pi, decimal.Zero, malformed(p+"/CdtTrfTxInf", "at least one required")
	}
	sum := decimal.Zero
	for j, t := range x.CdtTrfTxInf {
		ct, err := parseCreditTransfer(fmt.Sprintf("%s/CdtTrfTxInf[%d]", p, j), t, pi.ExecutionDate, e2e)
		if err != nil {
			return pi, sum, err
		}
		sum = sum.Add(ct.Amount)
		pi.Transfers = append(pi.Transfers, ct)
	}
	if x.NbOfTxs != "" {
		if pi.NumberOfTxs, err = parseCount(p+"/NbOfTxs", x.NbOfTxs); err != nil {
			return pi, sum, err
		}
		if pi.NumberOfTxs != len(pi.Transfers) {
			return pi, sum, malformed(p+"/NbOfTxs", "says %d, the PmtInf holds %d", pi.NumberOfTxs, len(pi.Transfers))
		}
	}
	if x.CtrlSum != "" {
		if pi.ControlSum, _, err = (&Amount{Ccy: "XXX", Value: x.CtrlSum}).parse(p + "/CtrlSum"); err != nil {
			return pi, sum, err
		}
		if !pi.ControlSum.Equal(sum) {
			return pi, sum, malformed(p+"/CtrlSum", "says %s, the transfers add up to %s", pi.ControlSum, sum)
		}
	}
	return pi, sum, nil
}

// parseCreditTransfer reads the CdtTrfTxInf at path tp, executed on date;
// its EndToEndId must be new to e2e, which records it.
func parseCreditTransfer(tp string, t xmlCdtTrfTx, date time.Time, e2e map[string]string) (CreditTransfer, error) {
	var err error
	ct := CreditTransfer{EndToEndID: t.PmtId.EndToEndId, ExecutionDate: date,
		Creditor: Party{Name: t.Cdtr.Nm, Account: t.CdtrAcct.id()}}
	if t.CdtrAgt != nil {
		ct.Creditor.Agent = t.CdtrAgt.id()
	}
	if t.RmtInf != nil {
		ct.Remittance = t.RmtInf.Ustrd
	}
	if !max35RE.MatchString(ct.EndToEndID) {
		return ct, malformed(tp+"/PmtId/EndToEndId", "want 1 to 35 characters")
	}
	if prev, dup := e2e[ct.EndToEndID]; dup {
		return ct, malformed(tp+"/PmtId/EndToEndId", "%s already used at %s", ct.EndToEndID, prev)
	}
	e2e[ct.EndToEndID] = tp
	if ct.Amount, ct.Currency, err = t.Amt.InstdAmt.parse(tp + "/Amt/InstdAmt"); err != nil {
		return ct, err
	}
	if !ct.Amount.IsPositive() {
		return ct, malformed(tp+"/Amt/InstdAmt", "must be positive")
	}
	for _, f := range []struct{ path, v string }{{"/Cdtr/Nm", ct.Creditor.Name}, {"/CdtrAcct/Id", ct.Creditor.Account}} {
		if err := required(tp+f.path, f.v); err != nil {
			return ct, err
		}
	}
	return ct, nil
}

func parseCount(path, s string) (int, error) {
	if !countRE.MatchString(s) {
		return 0, malformed(path, "want a count (1 to 15 digits), got %q", clip(s))
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, malformed(path, "want a count, got %q", clip(s))
	}
	return n, nil
}

func (a xmlAccount) id() string {
	if a.Id.IBAN != "" {
		return a.Id.IBAN
	}
	if a.Id.Othr != nil {
		return a.Id.Othr.Id
	}
	return ""
}

func (a xmlAgent) id() string {
	if a.FinInstnId.BICFI != "" {
		return a.FinInstnId.BICFI
	}
	if a.FinInstnId.ClrSysMmbId != nil {
		return a.FinInstnId.ClrSysMmbId.MmbId
	}
	return ""
}
