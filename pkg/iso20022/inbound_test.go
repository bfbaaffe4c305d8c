package iso20022

import (
	"errors"
	"strings"
	"testing"
)

const pain002 = `<?xml version="1.0" encoding="UTF-8"?>
<Document xmlns="urn:iso:std:iso:20022:tech:xsd:pain.002.001.10">
  <CstmrPmtStsRpt>
    <GrpHdr><MsgId>BANK-STS-1</MsgId><CreDtTm>2026-12-01T15:00:00+08:00</CreDtTm></GrpHdr>
    <OrgnlGrpInfAndSts>
      <OrgnlMsgId>pb-20261201</OrgnlMsgId><OrgnlMsgNmId>pain.001.001.09</OrgnlMsgNmId><GrpSts>PART</GrpSts>
    </OrgnlGrpInfAndSts>
    <OrgnlPmtInfAndSts>
      <OrgnlPmtInfId>pb-20261201-CNY-20261201</OrgnlPmtInfId>
      <TxInfAndSts><OrgnlInstrId>e2e-a</OrgnlInstrId><OrgnlEndToEndId>e2e-a</OrgnlEndToEndId><TxSts>ACCP</TxSts></TxInfAndSts>
      <TxInfAndSts><OrgnlEndToEndId>e2e-b</OrgnlEndToEndId><TxSts>RJCT</TxSts>
        <StsRsnInf><Rsn><Cd>AC06</Cd></Rsn><AddtlInf>account blocked</AddtlInf></StsRsnInf></TxInfAndSts>
      <TxInfAndSts><OrgnlEndToEndId>e2e-x</OrgnlEndToEndId><TxSts>RJCT</TxSts>
        <StsRsnInf><Rsn><Prtry>B123</Prtry></Rsn></StsRsnInf></TxInfAndSts>
    </OrgnlPmtInfAndSts>
  </CstmrPmtStsRpt>
</Document>`

func TestParsePain002(t *testing.T) {
	r, err := ParsePain002([]byte(pain002))
	if err != nil {
		t.Fatal(err)
	}
	if r.MessageID != "BANK-STS-1" || r.OriginalMessageID != "pb-20261201" || r.OriginalMessageNameID != "pain.001.001.09" || r.GroupStatus != "PART" || r.CreatedAt.UTC().Hour() != 7 {
		t.Errorf("header %+v", r)
	}
	if len(r.PaymentInfos) != 1 || r.PaymentInfos[0].OriginalPaymentInfoID != "pb-20261201-CNY-20261201" {
		t.Fatalf("pmtinfs %+v", r.PaymentInfos)
	}
	tx := r.PaymentInfos[0].Transactions
	want := []TransactionStatus{
		{Path: "CstmrPmtStsRpt/OrgnlPmtInfAndSts[0]/TxInfAndSts[0]", OriginalEndToEndID: "e2e-a", OriginalInstructionID: "e2e-a", Status: "ACCP"},
		{Path: "CstmrPmtStsRpt/OrgnlPmtInfAndSts[0]/TxInfAndSts[1]", OriginalEndToEndID: "e2e-b", Status: "RJCT", Reasons: []Reason{{Code: "AC06", AdditionalInfo: "account blocked"}}},
		{Path: "CstmrPmtStsRpt/OrgnlPmtInfAndSts[0]/TxInfAndSts[2]", OriginalEndToEndID: "e2e-x", Status: "RJCT", Reasons: []Reason{{Code: "B123", Proprietary: true}}},
	}
	if len(tx) != len(want) {
		t.Fatalf("%d statuses, want %d", len(tx), len(want))
	}
	for i := range want {
		g, w := tx[i], want[i]
		if g.Path != w.Path || g.OriginalEndToEndID != w.OriginalEndToEndID || g.OriginalInstructionID != w.OriginalInstructionID || g.Status != w.Status || len(g.Reasons) != len(w.Reasons) {
			t.Errorf("tx %d: %+v, want %+v", i, g, w)
			continue
		}
		for j := range w.Reasons {
			if g.Reasons[j] != w.Reasons[j] {
				t.Errorf("tx %d reason %d: %+v, want %+v", i, j, g.Reasons[j], w.Reasons[j])
			}
		}
	}
	if !Accepted("ACCP") || !Accepted("ACSC") || Accepted("ACTC") || Accepted("RJCT") || Accepted("PDNG") {
		t.Error("Accepted")
	}
}

// OrgnlNbOfTxs, at group and PmtInf level, says how many payments the
// original message had (a reader tells from it whether a report names
// every one); optional, and one that is not a count reads as not given.
func TestParsePain002OriginalTransactions(t *testing.T) {
	for _, tt := range []struct {
		give string
		want int
	}{
		{give: "", want: 0},
		{give: "<OrgnlNbOfTxs>3</OrgnlNbOfTxs>", want: 3},
		{give: "<OrgnlNbOfTxs> 12 </OrgnlNbOfTxs>", want: 12},
		{give: "<OrgnlNbOfTxs>three</OrgnlNbOfTxs>", want: 0},
		{give: "<OrgnlNbOfTxs>-1</OrgnlNbOfTxs>", want: 0},
		{give: "<OrgnlNbOfTxs>1234567890123456</OrgnlNbOfTxs>", want: 0},
	} {
		doc := strings.Replace(strings.Replace(pain002, "<OrgnlMsgNmId>pain.001.001.09</OrgnlMsgNmId>",
			"<OrgnlMsgNmId>pain.001.001.09</OrgnlMsgNmId>"+tt.give, 1),
			"<OrgnlPmtInfId>pb-20261201-CNY-20261201</OrgnlPmtInfId>", "<OrgnlPmtInfId>pb-20261201-CNY-20261201</OrgnlPmtInfId>"+tt.give, 1)
		r, err := ParsePain002([]byte(doc))
		if err != nil {
			t.Errorf("%q: %v", tt.give, err)
			continue
		}
		if r.OriginalTransactions != tt.want || r.PaymentInfos[0].OriginalTransactions != tt.want {
			t.Errorf("%q: group %d, PmtInf %d; want %d", tt.give, r.OriginalTransactions, r.PaymentInfos[0].OriginalTransactions, tt.want)
		}
	}
}

// A report that misses what a payout's fate depends on is refused, naming
// the element.
func TestParsePain002Malformed(t *testing.T) {
	for _, tc := range []struct {
		give, with, wantElem string
	}{
		{"<OrgnlEndToEndId>e2e-a</OrgnlEndToEndId>", "", "CstmrPmtStsRpt/OrgnlPmtInfAndSts[0]/TxInfAndSts[0]/OrgnlEndToEndId"},
		{"<TxSts>ACCP</TxSts>", "<TxSts>OKAY</TxSts>", "CstmrPmtStsRpt/OrgnlPmtInfAndSts[0]/TxInfAndSts[0]/TxSts"},
		{"<TxSts>ACCP</TxSts>", "", "CstmrPmtStsRpt/OrgnlPmtInfAndSts[0]/TxInfAndSts[0]/TxSts"},
		{"<StsRsnInf><Rsn><Cd>AC06</Cd></Rsn><AddtlInf>account blocked</AddtlInf></StsRsnInf>", "", "CstmrPmtStsRpt/OrgnlPmtInfAndSts[0]/TxInfAndSts[1]/StsRsnInf"},
		{"<Rsn><Cd>AC06</Cd></Rsn>", "<Rsn></Rsn>", "CstmrPmtStsRpt/OrgnlPmtInfAndSts[0]/TxInfAndSts[1]/StsRsnInf[0]/Rsn"},
		{"<OrgnlMsgId>pb-20261201</OrgnlMsgId>", "", "CstmrPmtStsRpt/OrgnlGrpInfAndSts/OrgnlMsgId"},
		{"<MsgId>BANK-STS-1</MsgId>", "", "CstmrPmtStsRpt/GrpHdr/MsgId"},
		{"<CreDtTm>2026-12-01T15:00:00+08:00</CreDtTm>", "<CreDtTm>yesterday</CreDtTm>", "CstmrPmtStsRpt/GrpHdr/CreDtTm"},
		{"</Document>", "", ""},
	} {
		bad := strings.Replace(pain002, tc.give, tc.with, 1)
		_, err := ParsePain002([]byte(bad))
		var me *MalformedError
		if !errors.As(err, &me) || me.Element != tc.wantElem {
			t.Errorf("%s → %q: %v, want malformed %q", tc.give, tc.with, err, tc.wantElem)
		}
	}
	if _, err := ParsePain002([]byte(camt054)); err == nil || !strings.Contains(err.Error(), "want a pain.002") {
		t.Errorf("a camt.054 read as pain.002: %v", err)
	}
}

const camt054 = `<?xml version="1.0" encoding="UTF-8"?>
<Document xmlns="urn:iso:std:iso:20022:tech:xsd:camt.054.001.08">
  <BkToCstmrDbtCdtNtfctn>
    <GrpHdr><MsgId>BANK-NTF-1</MsgId><CreDtTm>2026-12-02T09:00:00Z</CreDtTm></GrpHdr>
    <Ntfctn>
      <Id>NTF-1</Id>
      <Acct><Id><IBAN>GB33BUKB20201555555555</IBAN></Id><Ccy>CNY</Ccy></Acct>
      <Ntry>
        <NtryRef>1</NtryRef><Amt Ccy="CNY">620.10</Amt><CdtDbtInd>DBIT</CdtDbtInd><Sts><Cd>BOOK</Cd></Sts>
        <BookgDt><Dt>2026-12-02</Dt></BookgDt><ValDt><Dt>2026-12-02</Dt></ValDt><AcctSvcrRef>BNK-1</AcctSvcrRef>
        <BkTxCd><Domn><Cd>PMNT</Cd><Fmly><Cd>ICDT</Cd><SubFmlyCd>DMCT</SubFmlyCd></Fmly></Domn></BkTxCd>
        <NtryDtls><TxDtls><Refs><MsgId>pb-20261201</MsgId><EndToEndId>e2e-a</EndToEndId></Refs></TxDtls></NtryDtls>
      </Ntry>
      <Ntry>
        <Amt Ccy="CNY">150.00</Amt><CdtDbtInd>CRDT</CdtDbtInd><Sts><Cd>BOOK</Cd></Sts>
        <BookgDt><DtTm>2026-12-05T10:00:00Z</DtTm></BookgDt>
        <BkTxCd><Domn><Cd>PMNT</Cd><Fmly><Cd>ICDT</Cd><SubFmlyCd>RRTN</SubFmlyCd></Fmly></Domn></BkTxCd>
        <NtryDtls><TxDtls><Refs><EndToEndId>e2e-c</EndToEndId></Refs><Amt Ccy="CNY">150.00</Amt><CdtDbtInd>CRDT</CdtDbtInd>
          <RtrInf><Rsn><Cd>AC04</Cd></Rsn><AddtlInf>account closed</AddtlInf></RtrInf></TxDtls></NtryDtls>
      </Ntry>
    </Ntfctn>
  </BkToCstmrDbtCdtNtfctn>
</Document>`

func TestParseCamt054(t *testing.T) {
	n, err := ParseCamt054([]byte(camt054))
	if err != nil {
		t.Fatal(err)
	}
	if n.MessageID != "BANK-NTF-1" || len(n.Accounts) != 1 || n.Accounts[0].Account != "GB33BUKB20201555555555" || len(n.Accounts[0].Entries) != 2 {
		t.Fatalf("%+v", n)
	}
	e := n.Accounts[0].Entries
	if !e[0].Amount.Equal(d("620.10")) || e[0].Currency != "CNY" || e[0].CreditDebit != Debit || e[0].Status != EntryBooked || e[0].BookingDate.Day() != 2 ||
		e[0].BankRef != "BNK-1" || len(e[0].Transactions) != 1 || e[0].Transactions[0].EndToEndID != "e2e-a" ||
		!e[0].Transactions[0].Amount.Equal(d("620.10")) || e[0].Transactions[0].MessageID != "pb-20261201" || e[0].Transactions[0].Return != nil {
		t.Errorf("debit entry %+v", e[0])
	}
	r := e[1].Transactions[0]
	if e[1].CreditDebit != Credit || r.EndToEndID != "e2e-c" || r.Return == nil || r.Return.Code != "AC04" || r.Return.AdditionalInfo != "account closed" || !r.Amount.Equal(d("150")) {
		t.Errorf("return entry %+v / %+v", e[1], r)
	}
	// camt.054 v02: Sts is a plain code.
	v02 := strings.NewReplacer("camt.054.001.08", "camt.054.001.02", "<Sts><Cd>BOOK</Cd></Sts>", "<Sts>BOOK</Sts>").Replace(camt054)
	n2, err := ParseCamt054([]byte(v02))
	if err != nil || n2.Accounts[0].Entries[0].Status != EntryBooked || n2.Accounts[0].Entries[1].Status != EntryBooked {
		t.Errorf("v02: %v %+v", err, n2)
	}
}

// RvslInd is an xs:boolean: "1" and "0" are as valid as "true" and
// "false" (a "1" was read as no reversal).
func TestParseCamt054Reversal(t *testing.T) {
	for _, tc := range []struct {
		give string
		want bool
	}{
		{"", false},
		{"<RvslInd>true</RvslInd>", true},
		{"<RvslInd>1</RvslInd>", true},
		{"<RvslInd> 1 </RvslInd>", true},
		{"<RvslInd>false</RvslInd>", false},
		{"<RvslInd>0</RvslInd>", false},
	} {
		doc := strings.Replace(camt054, "<CdtDbtInd>DBIT</CdtDbtInd>", "<CdtDbtInd>DBIT</CdtDbtInd>"+tc.give, 1)
		n, err := ParseCamt054([]byte(doc))
		if err != nil {
			t.Errorf("%q: %v", tc.give, err)
			continue
		}
		if got := n.Accounts[0].Entries[0].Reversal; got != tc.want {
			t.Errorf("%q: reversal %v, want %v", tc.give, got, tc.want)
		}
	}
}

// An entry that cannot be read is set aside with its error, the others
// read: one malformed entry (another account's, a deposit) refused the
// whole file, and with it a return of a paid payout beside it.
func TestParseCamt054Malformed(t *testing.T) {
	const e0 = "BkToCstmrDbtCdtNtfctn/Ntfctn[0]/Ntry[0]"
	const e1 = "BkToCstmrDbtCdtNtfctn/Ntfctn[0]/Ntry[1]"
	for _, tc := range []struct {
		give, with, wantElem string
	}{
		{`<Amt Ccy="CNY">620.10</Amt>`, `<Amt Ccy="CNY">6.2e2</Amt>`, e0 + "/Amt"},
		{`<Amt Ccy="CNY">620.10</Amt>`, `<Amt Ccy="yuan">620.10</Amt>`, e0 + "/Amt/@Ccy"},
		{`<Amt Ccy="CNY">620.10</Amt>`, ``, e0 + "/Amt"},
		{`<CdtDbtInd>DBIT</CdtDbtInd>`, `<CdtDbtInd>OUT</CdtDbtInd>`, e0 + "/CdtDbtInd"},
		{`<Sts><Cd>BOOK</Cd></Sts>`, ``, e0 + "/Sts"},
		{`<Sts><Cd>BOOK</Cd></Sts>`, `<Sts><Cd>DONE</Cd></Sts>`, e0 + "/Sts"},
		{`<BookgDt><Dt>2026-12-02</Dt></BookgDt>`, ``, e0 + "/BookgDt"},
		{`<BookgDt><Dt>2026-12-02</Dt></BookgDt>`, `<BookgDt><Dt>02.12.2026</Dt></BookgDt>`, e0 + "/BookgDt/Dt"},
		{`<RtrInf><Rsn><Cd>AC04</Cd></Rsn>`, `<RtrInf><Rsn></Rsn>`, e1 + "/NtryDtls[0]/TxDtls[0]/RtrInf/Rsn"},
		{`<CdtDbtInd>DBIT</CdtDbtInd>`, `<CdtDbtInd>DBIT</CdtDbtInd><RvslInd>yes</RvslInd>`, e0 + "/RvslInd"},
	} {
		bad := strings.Replace(camt054, tc.give, tc.with, 1)
		n, err := ParseCamt054([]byte(bad))
		if err != nil || len(n.Accounts) != 1 || len(n.Accounts[0].Entries) != 1 || len(n.Accounts[0].Unreadable) != 1 ||
			n.Accounts[0].Unreadable[0].Element != tc.wantElem {
			t.Errorf("%s → %q: %v %+v, want the other entry read and %q unreadable", tc.give, tc.with, err, n.Accounts, tc.wantElem)
		}
	}
}

// What no entry can be read without (the header, a notification's
// account) refuses the whole file.
func TestParseCamt054MalformedFile(t *testing.T) {
	for _, tc := range []struct {
		give, with, wantElem string
	}{
		{`<Id><IBAN>GB33BUKB20201555555555</IBAN></Id>`, ``, "BkToCstmrDbtCdtNtfctn/Ntfctn[0]/Acct/Id"},
		{`<MsgId>BANK-NTF-1</MsgId>`, ``, "BkToCstmrDbtCdtNtfctn/GrpHdr/MsgId"},
		{`<Id>NTF-1</Id>`, ``, "BkToCstmrDbtCdtNtfctn/Ntfctn[0]/Id"},
	} {
		bad := strings.Replace(camt054, tc.give, tc.with, 1)
		_, err := ParseCamt054([]byte(bad))
		var me *MalformedError
		if !errors.As(err, &me) || me.Element != tc.wantElem {
			t.Errorf("%s → %q: %v, want malformed %q", tc.give, tc.with, err, tc.wantElem)
		}
	}
}

// RtrInf's Rsn is optional (0..1): a return with only AddtlInf is read,
// its code empty and its text kept. It was refused ("a return needs its
// reason"), and with it every other entry of the file.
func TestParseCamt054ReturnWithoutReason(t *testing.T) {
	doc := strings.Replace(camt054, `<RtrInf><Rsn><Cd>AC04</Cd></Rsn><AddtlInf>`, `<RtrInf><AddtlInf>`, 1)
	n, err := ParseCamt054([]byte(doc))
	if err != nil || len(n.Accounts[0].Entries) != 2 {
		t.Fatalf("%v %+v, want both entries read", err, n.Accounts)
	}
	r := n.Accounts[0].Entries[1].Transactions[0].Return
	if r == nil || r.Code != "" || r.AdditionalInfo != "account closed" {
		t.Errorf("return %+v, want no code and the additional text", r)
	}
}
