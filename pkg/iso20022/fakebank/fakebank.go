// Package fakebank is a local bank for tests of the bank-file rail. It
// takes the platform's pain.001 files from the outbox directory (where the
// bank's SFTP client would pick them up), checks each as a bank's file
// intake does (a strict read with control sums, the debtor's account, a
// message id never seen before), and answers as a bank does: a pain.002
// status report per file, camt.054 notifications of the debits it books
// and, later, of the payments that come back. Each creditor account's
// fate is read from its last four digits, like the sandbox's test
// accounts: 0002 is blocked (RJCT AC06), 0004 closed (RJCT AC04), 0003 is
// paid and then returned (AC04), anything else is paid.
package fakebank

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/gpubill/gpubill/pkg/iso20022"
)

// Fates of a payment at the fake bank.
const (
	FatePaid     = "paid"
	FateBlocked  = "blocked"  // RJCT AC06
	FateClosed   = "closed"   // RJCT AC04
	FateReturned = "returned" // booked, then returned AC04
)

// FateOf reads a creditor account's fate from its last four digits.
func FateOf(account string) string {
	switch {
	case strings.HasSuffix(account, "0002"):
		return FateBlocked
	case strings.HasSuffix(account, "0004"):
		return FateClosed
	case strings.HasSuffix(account, "0003"):
		return FateReturned
	}
	return FatePaid
}

// Bank is the fake bank.
type Bank struct {
	Outbox, Inbox string
	Account       string // the client account the platform's files must debit
	Now           func() time.Time

	taken map[string]bool // outbox file names already taken
	msgs  map[string]bool // pain.001 message ids accepted
	seq   int
}

// New returns a bank reading outbox and writing inbox.
func New(outbox, inbox, account string) *Bank {
	return &Bank{Outbox: outbox, Inbox: inbox, Account: account, Now: time.Now, taken: map[string]bool{}, msgs: map[string]bool{}}
}

// File is a pain.001 the bank took, with what it answered.
type File struct {
	Name      string
	Raw       []byte
	Msg       iso20022.Pain001
	Duplicate bool // its message id was seen before: refused whole (DU01)
}

// Take reads the pain.001 files the platform delivered since the last call
// (temporary dot files are not finished files: skipped, as an SFTP client
// would). A file that does not read strictly is an error: a real bank
// would refuse it, and the test must see why.
func (b *Bank) Take() ([]File, error) {
	des, err := os.ReadDir(b.Outbox)
	if err != nil {
		return nil, err
	}
	var out []File
	for _, de := range des {
		if !de.Type().IsRegular() || strings.HasPrefix(de.Name(), ".") || b.taken[de.Name()] {
			continue
		}
		raw, err := os.ReadFile(filepath.Join(b.Outbox, de.Name()))
		if err != nil {
			return nil, err
		}
		f, err := b.intake(de.Name(), raw)
		if err != nil {
			return nil, err
		}
		b.taken[de.Name()] = true
		out = append(out, f)
	}
	return out, nil
}

// Resend is the platform's SFTP client uploading a file again (a retry
// after a lost acknowledgement): the bank reads it like any other.
func (b *Bank) Resend(name string, raw []byte) (File, error) { return b.intake(name, raw) }

func (b *Bank) intake(name string, raw []byte) (File, error) {
	k, err := iso20022.Detect(raw)
	if err != nil {
		return File{}, fmt.Errorf("fake bank: %s: %w", name, err)
	}
	if string(k) != "pain.001.001.09" {
		return File{}, fmt.Errorf("fake bank: %s is %s, the bank takes pain.001.001.09", name, k)
	}
	msg, err := iso20022.ParsePain001(raw)
	if err != nil {
		return File{}, fmt.Errorf("fake bank: %s: %w", name, err)
	}
	for _, pi := range msg.PaymentInfos {
		if pi.Debtor.Account != b.Account {
			return File{}, fmt.Errorf("fake bank: %s: PmtInf %s debits %s, not the client account %s", name, pi.ID, pi.Debtor.Account, b.Account)
		}
		if pi.NumberOfTxs == 0 || pi.ControlSum.IsZero() {
			return File{}, fmt.Errorf("fake bank: %s: PmtInf %s without NbOfTxs and CtrlSum", name, pi.ID)
		}
	}
	f := File{Name: name, Raw: raw, Msg: msg, Duplicate: b.msgs[msg.MessageID]}
	b.msgs[msg.MessageID] = true
	return f, nil
}

func (b *Bank) id(prefix string) string {
	b.seq++
	return fmt.Sprintf("%s-%d-%d", prefix, b.Now().Unix(), b.seq)
}

func esc(s string) string {
	var buf bytes.Buffer
	if err := xml.EscapeText(&buf, []byte(s)); err != nil {
		panic(err) // a bytes.Buffer takes every write
	}
	return buf.String()
}

// StatusReport is the pain.002 answering f: each payment accepted (ACCP)
// or rejected with its reason; a duplicate file is refused whole (GrpSts
// RJCT, DU01) without payment statuses.
func (b *Bank) StatusReport(f File) []byte {
	var s strings.Builder
	fmt.Fprintf(&s, `<?xml version="1.0" encoding="UTF-8"?>
<Document xmlns="urn:iso:std:iso:20022:tech:xsd:pain.002.001.10">
<CstmrPmtStsRpt>
<GrpHdr><MsgId>%s</MsgId><CreDtTm>%s</CreDtTm></GrpHdr>
<OrgnlGrpInfAndSts><OrgnlMsgId>%s</OrgnlMsgId><OrgnlMsgNmId>pain.001.001.09</OrgnlMsgNmId>`,
		b.id("STS"), b.Now().UTC().Format(time.RFC3339), esc(f.Msg.MessageID))
	if f.Duplicate {
		s.WriteString(`<GrpSts>RJCT</GrpSts><StsRsnInf><Rsn><Cd>DU01</Cd></Rsn><AddtlInf>duplicate message id</AddtlInf></StsRsnInf></OrgnlGrpInfAndSts>
</CstmrPmtStsRpt></Document>
`)
		return []byte(s.String())
	}
	s.WriteString("<GrpSts>PART</GrpSts></OrgnlGrpInfAndSts>\n")
	for _, pi := range f.Msg.PaymentInfos {
		fmt.Fprintf(&s, "<OrgnlPmtInfAndSts><OrgnlPmtInfId>%s</OrgnlPmtInfId>\n", esc(pi.ID))
		for _, t := range pi.Transfers {
			fmt.Fprintf(&s, "<TxInfAndSts><OrgnlEndToEndId>%s</OrgnlEndToEndId>", esc(t.EndToEndID))
			switch FateOf(t.Creditor.Account) {
			case FateBlocked:
				s.WriteString("<TxSts>RJCT</TxSts><StsRsnInf><Rsn><Cd>AC06</Cd></Rsn><AddtlInf>account blocked</AddtlInf></StsRsnInf>")
			case FateClosed:
				s.WriteString("<TxSts>RJCT</TxSts><StsRsnInf><Rsn><Cd>AC04</Cd></Rsn></StsRsnInf>")
			default:
				s.WriteString("<TxSts>ACCP</TxSts>")
			}
			s.WriteString("</TxInfAndSts>\n")
		}
		s.WriteString("</OrgnlPmtInfAndSts>\n")
	}
	s.WriteString("</CstmrPmtStsRpt></Document>\n")
	return []byte(s.String())
}

// entry writes one camt.054 Ntry for a payment.
func entry(s *strings.Builder, t iso20022.CreditTransfer, cdtDbt, booked, bankTx string, ret bool) {
	fmt.Fprintf(s, `<Ntry><Amt Ccy="%s">%s</Amt><CdtDbtInd>%s</CdtDbtInd><Sts><Cd>BOOK</Cd></Sts><BookgDt><Dt>%s</Dt></BookgDt>
<BkTxCd><Domn><Cd>PMNT</Cd><Fmly><Cd>ICDT</Cd><SubFmlyCd>%s</SubFmlyCd></Fmly></Domn></BkTxCd>
<NtryDtls><TxDtls><Refs><EndToEndId>%s</EndToEndId></Refs><Amt Ccy="%s">%s</Amt><CdtDbtInd>%s</CdtDbtInd>`,
		t.Currency, t.Amount.StringFixed(2), cdtDbt, booked, bankTx, esc(t.EndToEndID), t.Currency, t.Amount.StringFixed(2), cdtDbt)
	if ret {
		s.WriteString("<RtrInf><Rsn><Cd>AC04</Cd></Rsn><AddtlInf>account closed after payment</AddtlInf></RtrInf>")
	}
	s.WriteString("</TxDtls></NtryDtls></Ntry>\n")
}

func (b *Bank) notification(entries func(*strings.Builder)) []byte {
	var s strings.Builder
	fmt.Fprintf(&s, `<?xml version="1.0" encoding="UTF-8"?>
<Document xmlns="urn:iso:std:iso:20022:tech:xsd:camt.054.001.08">
<BkToCstmrDbtCdtNtfctn>
<GrpHdr><MsgId>%s</MsgId><CreDtTm>%s</CreDtTm></GrpHdr>
<Ntfctn><Id>%s</Id><Acct><Id><IBAN>%s</IBAN></Id></Acct>
`, b.id("NTF"), b.Now().UTC().Format(time.RFC3339), b.id("N"), esc(b.Account))
	entries(&s)
	s.WriteString("</Ntfctn></BkToCstmrDbtCdtNtfctn></Document>\n")
	return []byte(s.String())
}

func accepted(f File) []iso20022.CreditTransfer {
	var out []iso20022.CreditTransfer
	if f.Duplicate {
		return nil
	}
	for _, pi := range f.Msg.PaymentInfos {
		for _, t := range pi.Transfers {
			if fate := FateOf(t.Creditor.Account); fate == FatePaid || fate == FateReturned {
				out = append(out, t)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].EndToEndID < out[j].EndToEndID })
	return out
}

// Bookings is the camt.054 of the debits the bank booked for f's accepted
// payments (nil when there are none).
func (b *Bank) Bookings(f File) []byte {
	ts := accepted(f)
	if len(ts) == 0 {
		return nil
	}
	day := b.Now().UTC().Format(time.DateOnly)
	return b.notification(func(s *strings.Builder) {
		for _, t := range ts {
			entry(s, t, "DBIT", day, "DMCT", false)
		}
	})
}

// Returns is the camt.054 of f's payments that came back (nil when none).
func (b *Bank) Returns(f File) []byte {
	var ts []iso20022.CreditTransfer
	for _, t := range accepted(f) {
		if FateOf(t.Creditor.Account) == FateReturned {
			ts = append(ts, t)
		}
	}
	if len(ts) == 0 {
		return nil
	}
	day := b.Now().UTC().Format(time.DateOnly)
	return b.notification(func(s *strings.Builder) {
		for _, t := range ts {
			entry(s, t, "CRDT", day, "RRTN", true)
		}
	})
}

// Drop puts a file into the platform's inbox as the bank's SFTP server
// would: written under a dot name, then renamed.
func (b *Bank) Drop(name string, file []byte) error {
	if err := os.MkdirAll(b.Inbox, 0o750); err != nil {
		return err
	}
	tmp := filepath.Join(b.Inbox, "."+name+".part")
	if err := os.WriteFile(tmp, file, 0o640); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(b.Inbox, name))
}
