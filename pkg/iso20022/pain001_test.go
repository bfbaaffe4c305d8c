package iso20022

import (
	"bytes"
	"encoding/xml"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"
)

// node is a parsed XML element, for checking the written file element by
// element independently of the package's own reader.
type node struct {
	name  xml.Name
	attrs map[string]string
	text  string
	kids  []*node
}

func tree(t *testing.T, b []byte) *node {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(b))
	var stack []*node
	var root *node
	for {
		tok, err := dec.Token()
		if err != nil {
			break
		}
		switch x := tok.(type) {
		case xml.StartElement:
			n := &node{name: x.Name, attrs: map[string]string{}}
			for _, a := range x.Attr {
				n.attrs[a.Name.Local] = a.Value
			}
			if len(stack) > 0 {
				p := stack[len(stack)-1]
				p.kids = append(p.kids, n)
			} else {
				root = n
			}
			stack = append(stack, n)
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		case xml.CharData:
			if len(stack) > 0 {
				stack[len(stack)-1].text += strings.TrimSpace(string(x))
			}
		}
	}
	if root == nil {
		t.Fatal("no root element")
	}
	return root
}

func (n *node) names() []string {
	var out []string
	for _, k := range n.kids {
		out = append(out, k.name.Local)
	}
	return out
}

func (n *node) all(name string) []*node {
	var out []*node
	for _, k := range n.kids {
		if k.name.Local == name {
			out = append(out, k)
		}
	}
	return out
}

// at follows a path of child names ("GrpHdr/MsgId"); nil when absent.
func (n *node) at(path string) *node {
	cur := n
	for _, p := range strings.Split(path, "/") {
		kids := cur.all(p)
		if len(kids) != 1 {
			return nil
		}
		cur = kids[0]
	}
	return cur
}

func d(s string) decimal.Decimal { return decimal.RequireFromString(s) }

var (
	exec1 = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	exec2 = time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
)

func sampleBatch() CreditTransferBatch {
	return CreditTransferBatch{
		MessageID: "pb-20261201", CreatedAt: time.Date(2026, 12, 1, 14, 0, 3, 500, time.UTC), InitiatingParty: "GPU Market Ltd",
		Debtor: Party{Name: "GPU Market Ltd client money", Account: "GB33BUKB20201555555555", Agent: "BUKBGB22"},
		Transfers: []CreditTransfer{
			{EndToEndID: "e2e-b", Amount: d("300.00"), Currency: "CNY", ExecutionDate: exec1, Creditor: Party{Name: "Li Wei", Account: "6222000011110002", Agent: "102100099996"}},
			{EndToEndID: "e2e-a", Amount: d("620.10"), Currency: "CNY", ExecutionDate: exec1, Creditor: Party{Name: "Zhang San", Account: "6222000011110001", Agent: "ICBKCNBJ"}, Remittance: "gpubill payout e2e-a"},
			{EndToEndID: "e2e-c", Amount: d("25.5"), Currency: "USD", ExecutionDate: exec1, Creditor: Party{Name: "Ann Lee", Account: "DE89370400440532013000", Agent: "COBADEFFXXX"}},
			{EndToEndID: "e2e-d", Amount: d("1000"), Currency: "JPY", ExecutionDate: exec1, Creditor: Party{Name: "Sato", Account: "1234567890", Agent: "MHCBJPJT"}},
			{EndToEndID: "e2e-e", Amount: d("0.01"), Currency: "CNY", ExecutionDate: exec2, Creditor: Party{Name: "Wang Wu", Account: "6222000011110009", Agent: "ICBKCNBJ"}},
		},
	}
}

// The written pain.001 checked element by element with a plain XML reader:
// namespace, the schema's element order, required elements, one PmtInf per
// currency and execution date, NbOfTxs and CtrlSum at both levels computed
// from the inputs, accounts and agents in their choice (IBAN or Othr, BIC
// or clearing member), amounts at the currency's minor unit.
func TestBuildPain001ElementByElement(t *testing.T) {
	b := sampleBatch()
	out, err := BuildPain001(b)
	if err != nil {
		t.Fatal(err)
	}
	doc := tree(t, out)
	if doc.name.Local != "Document" || doc.name.Space != "urn:iso:std:iso:20022:tech:xsd:pain.001.001.09" {
		t.Fatalf("root %v", doc.name)
	}
	if got := strings.Join(doc.names(), ","); got != "CstmrCdtTrfInitn" {
		t.Fatalf("Document holds %s", got)
	}
	init := doc.kids[0]
	pis := init.all("PmtInf")
	if got := strings.Join(init.names(), ","); got != "GrpHdr,PmtInf,PmtInf,PmtInf,PmtInf" {
		t.Errorf("CstmrCdtTrfInitn holds %s", got)
	}
	gh := init.at("GrpHdr")
	if got := strings.Join(gh.names(), ","); got != "MsgId,CreDtTm,NbOfTxs,CtrlSum,InitgPty" {
		t.Errorf("GrpHdr holds %s", got)
	}
	// Expected values computed from the inputs, not from the builder.
	want := map[string]string{"MsgId": "pb-20261201", "CreDtTm": "2026-12-01T14:00:03Z", "NbOfTxs": "5", "CtrlSum": "1945.61", "InitgPty/Nm": "GPU Market Ltd"}
	for p, w := range want {
		if n := gh.at(p); n == nil || n.text != w {
			t.Errorf("GrpHdr/%s = %v, want %s", p, n, w)
		}
	}
	type pmt struct {
		id, date, n, sum, ccy string
		e2e                   []string
		amts                  []string
	}
	wantPmt := []pmt{
		{"pb-20261201-CNY-20261201", "2026-12-01", "2", "920.10", "CNY", []string{"e2e-a", "e2e-b"}, []string{"620.10", "300.00"}},
		{"pb-20261201-CNY-20261202", "2026-12-02", "1", "0.01", "CNY", []string{"e2e-e"}, []string{"0.01"}},
		{"pb-20261201-JPY-20261201", "2026-12-01", "1", "1000", "JPY", []string{"e2e-d"}, []string{"1000"}},
		{"pb-20261201-USD-20261201", "2026-12-01", "1", "25.50", "USD", []string{"e2e-c"}, []string{"25.50"}},
	}
	if len(pis) != len(wantPmt) {
		t.Fatalf("%d PmtInf, want %d", len(pis), len(wantPmt))
	}
	for i, w := range wantPmt {
		pi := pis[i]
		order := "PmtInfId,PmtMtd,BtchBookg,NbOfTxs,CtrlSum,ReqdExctnDt,Dbtr,DbtrAcct,DbtrAgt,ChrgBr" + strings.Repeat(",CdtTrfTxInf", len(w.e2e))
		if got := strings.Join(pi.names(), ","); got != order {
			t.Errorf("PmtInf[%d] holds %s, want %s", i, got, order)
		}
		for p, v := range map[string]string{"PmtInfId": w.id, "PmtMtd": "TRF", "NbOfTxs": w.n, "CtrlSum": w.sum, "ReqdExctnDt/Dt": w.date,
			"Dbtr/Nm": b.Debtor.Name, "DbtrAcct/Id/IBAN": b.Debtor.Account, "DbtrAgt/FinInstnId/BICFI": b.Debtor.Agent} {
			if n := pi.at(p); n == nil || n.text != v {
				t.Errorf("PmtInf[%d]/%s = %v, want %s", i, p, n, v)
			}
		}
		for j, tx := range pi.all("CdtTrfTxInf") {
			if tx.at("PmtId/EndToEndId").text != w.e2e[j] {
				t.Errorf("PmtInf[%d] tx %d EndToEndId %s, want %s", i, j, tx.at("PmtId/EndToEndId").text, w.e2e[j])
			}
			amt := tx.at("Amt/InstdAmt")
			if amt == nil || amt.text != w.amts[j] || amt.attrs["Ccy"] != w.ccy {
				t.Errorf("PmtInf[%d] tx %d InstdAmt %v, want %s %s", i, j, amt, w.amts[j], w.ccy)
			}
			for _, p := range []string{"PmtId", "Amt", "CdtrAgt/FinInstnId", "Cdtr/Nm", "CdtrAcct/Id"} {
				if tx.at(p) == nil {
					t.Errorf("PmtInf[%d] tx %d: %s missing", i, j, p)
				}
			}
		}
	}
	// The creditor's account and bank in their choice.
	a := pis[0].all("CdtTrfTxInf")[0]
	if a.at("CdtrAcct/Id/Othr/Id").text != "6222000011110001" || a.at("CdtrAgt/FinInstnId/BICFI").text != "ICBKCNBJ" || a.at("RmtInf/Ustrd").text != "gpubill payout e2e-a" {
		t.Errorf("creditor of e2e-a: %+v", a)
	}
	bb := pis[0].all("CdtTrfTxInf")[1]
	if bb.at("CdtrAgt/FinInstnId/ClrSysMmbId/MmbId").text != "102100099996" || bb.at("RmtInf") != nil {
		t.Errorf("creditor of e2e-b: %+v", bb)
	}
	if n := pis[3].at("CdtTrfTxInf/CdtrAcct/Id/IBAN"); n == nil || n.text != "DE89370400440532013000" {
		t.Errorf("IBAN creditor: %v", n)
	}
}

// What is written reads back the same, control sums checked by the reader.
func TestPain001RoundTrip(t *testing.T) {
	b := sampleBatch()
	out, err := BuildPain001(b)
	if err != nil {
		t.Fatal(err)
	}
	p, err := ParsePain001(out)
	if err != nil {
		t.Fatal(err)
	}
	if p.MessageID != b.MessageID || p.NumberOfTxs != len(b.Transfers) || !p.ControlSum.Equal(d("1945.61")) || p.InitiatingParty != b.InitiatingParty {
		t.Errorf("header %+v", p)
	}
	got := map[string]CreditTransfer{}
	for _, pi := range p.PaymentInfos {
		if pi.Debtor != b.Debtor {
			t.Errorf("debtor %+v", pi.Debtor)
		}
		for _, ct := range pi.Transfers {
			got[ct.EndToEndID] = ct
		}
	}
	for _, w := range b.Transfers {
		g := got[w.EndToEndID]
		if !g.Amount.Equal(w.Amount) || g.Currency != w.Currency || !g.ExecutionDate.Equal(w.ExecutionDate) || g.Creditor != w.Creditor || g.Remittance != w.Remittance {
			t.Errorf("%s: got %+v, want %+v", w.EndToEndID, g, w)
		}
	}
}

// A file whose control sums disagree with its transfers is refused,
// naming the element.
func TestParsePain001ControlSums(t *testing.T) {
	out, err := BuildPain001(sampleBatch())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		give, with, wantElem string
	}{
		{"<CtrlSum>1945.61</CtrlSum>", "<CtrlSum>1945.62</CtrlSum>", "CstmrCdtTrfInitn/GrpHdr/CtrlSum"},
		{"<NbOfTxs>5</NbOfTxs>", "<NbOfTxs>6</NbOfTxs>", "CstmrCdtTrfInitn/GrpHdr/NbOfTxs"},
		{"<CtrlSum>920.10</CtrlSum>", "<CtrlSum>920.00</CtrlSum>", "CstmrCdtTrfInitn/PmtInf[0]/CtrlSum"},
		{"<NbOfTxs>2</NbOfTxs>", "<NbOfTxs>3</NbOfTxs>", "CstmrCdtTrfInitn/PmtInf[0]/NbOfTxs"},
		{`<InstdAmt Ccy="CNY">300.00</InstdAmt>`, `<InstdAmt Ccy="CNY">-300.00</InstdAmt>`, "CstmrCdtTrfInitn/PmtInf[0]/CdtTrfTxInf[1]/Amt/InstdAmt"},
		{"<EndToEndId>e2e-b</EndToEndId>", "<EndToEndId>e2e-a</EndToEndId>", "CstmrCdtTrfInitn/PmtInf[0]/CdtTrfTxInf[1]/PmtId/EndToEndId"},
		{"<PmtMtd>TRF</PmtMtd>", "<PmtMtd>CHK</PmtMtd>", "CstmrCdtTrfInitn/PmtInf[0]/PmtMtd"},
	} {
		bad := bytes.Replace(out, []byte(tc.give), []byte(tc.with), 1)
		if bytes.Equal(bad, out) {
			t.Fatalf("%s not in the file", tc.give)
		}
		_, err := ParsePain001(bad)
		var me *MalformedError
		if !errors.As(err, &me) || me.Element != tc.wantElem {
			t.Errorf("%s → %s: %v, want malformed %s", tc.give, tc.with, err, tc.wantElem)
		}
	}
}

// The builder refuses what a bank would refuse.
func TestBuildPain001Refuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		give func(*CreditTransferBatch)
		want string
	}{
		{"duplicate end-to-end id", func(b *CreditTransferBatch) { b.Transfers[1].EndToEndID = "e2e-b" }, "twice"},
		{"amount finer than the currency", func(b *CreditTransferBatch) { b.Transfers[0].Amount = d("1.005") }, "minor units"},
		{"zero amount", func(b *CreditTransferBatch) { b.Transfers[0].Amount = decimal.Zero }, "positive"},
		{"not a bank currency", func(b *CreditTransferBatch) { b.Transfers[0].Currency = "USDC" }, "ISO 4217"},
		{"end-to-end id over 35", func(b *CreditTransferBatch) { b.Transfers[0].EndToEndID = strings.Repeat("x", 36) }, "at most 35"},
		{"creditor without account", func(b *CreditTransferBatch) { b.Transfers[0].Creditor.Account = "" }, "creditor.account"},
		{"no debtor agent", func(b *CreditTransferBatch) { b.Debtor.Agent = "" }, "debtor.agent"},
		{"no transfers", func(b *CreditTransferBatch) { b.Transfers = nil }, "no transfers"},
		{"control character in a name", func(b *CreditTransferBatch) { b.Transfers[0].Creditor.Name = "a\x00b" }, "XML cannot carry"},
		// ISO 20022's decimal: totalDigits 18 (10^16 yuan writes 19 digits: 10000000000000000.00).
		{"amount over 18 digits", func(b *CreditTransferBatch) { b.Transfers[0].Amount = d("10000000000000000") }, "18 digits"},
		// 9e15 + 9e15 yuan: each fits (18 digits), the sums do not.
		{"control sum over 18 digits", func(b *CreditTransferBatch) {
			b.Transfers[0].Amount, b.Transfers[1].Amount = d("9000000000000000"), d("9000000000000000")
		}, "control sum"},
	} {
		b := sampleBatch()
		tc.give(&b)
		if _, err := BuildPain001(b); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.want)
		}
	}
}

func TestDetect(t *testing.T) {
	for _, tc := range []struct {
		give, want, wantErr string
	}{
		{`<?xml version="1.0"?><Document xmlns="urn:iso:std:iso:20022:tech:xsd:pain.002.001.10"><CstmrPmtStsRpt/></Document>`, "pain.002.001.10", ""},
		{`<Document xmlns="urn:iso:std:iso:20022:tech:xsd:camt.054.001.02"/>`, "camt.054.001.02", ""},
		{`<Document xmlns="urn:iso:std:iso:20022:tech:xsd:camt.053.001.08"/>`, "camt.053.001.08", "unsupported"},
		{`<Doc xmlns="urn:iso:std:iso:20022:tech:xsd:pain.002.001.10"/>`, "", "root element must be Document"},
		{`<Document xmlns="urn:example"/>`, "", "not ISO 20022"},
		{`not xml at all`, "", "no root element"},
		{`<Document`, "", "not XML"},
	} {
		k, err := Detect([]byte(tc.give))
		if tc.wantErr == "" && (err != nil || string(k) != tc.want) {
			t.Errorf("%s: %s %v, want %s", tc.give, k, err, tc.want)
		}
		if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("%s: %v, want an error with %q", tc.give, err, tc.wantErr)
		}
	}
}
