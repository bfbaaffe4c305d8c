package ledger_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shopspring/decimal"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/server"
	ledgerv1 "github.com/gpubill/gpubill/proto/gen/gpubill/ledger/v1"
)

// payoutCutTransfersMax mirrors payout's bankfile batchTransfersMax: one
// day's pain.001 carries at most this many transfers, each booked on its
// own (BtchBookg false), so each is one entry of the day's camt.053.
const payoutCutTransfersMax = 50_000

// statementBodyBytesMax mirrors pkg/server's limit of a statement upload.
const statementBodyBytesMax = 64 << 20

// camtPayoutEntry is one payout's debit as a bank reports it in camt.053:
// its references back to the pain.001, the payee and their bank, the
// remittance line. On one line, as banks' systems write it: 1 020 bytes
// (indented as here, 1 340: 50 000 of them fill 64 MiB).
var camtPayoutEntry = oneLine(`
      <Ntry>
        <NtryRef>%[1]d</NtryRef>
        <Amt Ccy="CNY">%[2]s</Amt>
        <CdtDbtInd>DBIT</CdtDbtInd>
        <Sts><Cd>BOOK</Cd></Sts>
        <BookgDt><Dt>2026-11-30</Dt></BookgDt>
        <ValDt><Dt>2026-11-30</Dt></ValDt>
        <AcctSvcrRef>ICBC20261130%08[1]d</AcctSvcrRef>
        <BkTxCd><Domn><Cd>PMNT</Cd><Fmly><Cd>ICDT</Cd><SubFmlyCd>DMCT</SubFmlyCd></Fmly></Domn></BkTxCd>
        <NtryDtls>
          <TxDtls>
            <Refs>
              <MsgId>pb-20261130-1400</MsgId>
              <PmtInfId>pb-20261130-1400-CNY-2026-11-30</PmtInfId>
              <InstrId>po-01JF8Q3Z9W4K7M2N5P6R%06[1]d</InstrId>
              <EndToEndId>po-01JF8Q3Z9W4K7M2N5P6R%06[1]d</EndToEndId>
              <TxId>ICBC-TX-20261130-%08[1]d</TxId>
            </Refs>
            <AmtDtls><InstdAmt><Amt Ccy="CNY">%[2]s</Amt></InstdAmt></AmtDtls>
            <RltdPties>
              <Cdtr><Pty><Nm>Provider %[1]d GPU Compute Co., Ltd.</Nm></Pty></Cdtr>
              <CdtrAcct><Id><Othr><Id>6222020200%09[1]d</Id></Othr></Id></CdtrAcct>
            </RltdPties>
            <RltdAgts><CdtrAgt><FinInstnId><BICFI>ICBKCNBJXXX</BICFI></FinInstnId></CdtrAgt></RltdAgts>
            <RmtInf><Ustrd>gpubill payout po-01JF8Q3Z9W4K7M2N5P6R%06[1]d cycle 2026-10-17</Ustrd></RmtInf>
          </TxDtls>
        </NtryDtls>
      </Ntry>`)

// oneLine is the XML s without its indentation, a line.
func oneLine(s string) string {
	var b strings.Builder
	for _, l := range strings.Split(s, "\n") {
		b.WriteString(strings.TrimSpace(l))
	}
	return b.String() + "\n"
}

// fullCutCamt053 is the camt.053 of a day whose bank file held n payouts
// of amount each, and its closing balance.
func fullCutCamt053(n int, amount string) ([]byte, decimal.Decimal) {
	opening := decimal.RequireFromString("900000000.00")
	closing := opening.Sub(decimal.RequireFromString(amount).Mul(decimal.NewFromInt(int64(n))))
	var b bytes.Buffer
	fmt.Fprintf(&b, `<?xml version="1.0" encoding="UTF-8"?>
<Document xmlns="urn:iso:std:iso:20022:tech:xsd:camt.053.001.08">
  <BkToCstmrStmt>
    <GrpHdr><MsgId>MSG-20261130</MsgId><CreDtTm>2026-12-01T01:00:00+08:00</CreDtTm></GrpHdr>
    <Stmt>
      <Id>STMT-CUT-20261130</Id>
      <Acct><Id><Othr><Id>CN-CLIENT-1</Id></Othr></Id><Ccy>CNY</Ccy></Acct>
      <Bal><Tp><CdOrPrtry><Cd>OPBD</Cd></CdOrPrtry></Tp><Amt Ccy="CNY">%s</Amt><CdtDbtInd>CRDT</CdtDbtInd><Dt><Dt>2026-11-30</Dt></Dt></Bal>
      <Bal><Tp><CdOrPrtry><Cd>CLBD</Cd></CdOrPrtry></Tp><Amt Ccy="CNY">%s</Amt><CdtDbtInd>CRDT</CdtDbtInd><Dt><Dt>2026-11-30</Dt></Dt></Bal>
`, opening.StringFixed(2), closing.StringFixed(2))
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, camtPayoutEntry, i, amount)
	}
	b.WriteString("    </Stmt>\n  </BkToCstmrStmt>\n</Document>\n")
	return b.Bytes(), closing
}

// fullCutCSV is the CSV statement of the same day, and its closing balance.
func fullCutCSV(n int, amount string) ([]byte, decimal.Decimal) {
	bal := decimal.RequireFromString("900000000.00")
	amt := decimal.RequireFromString(amount)
	var b bytes.Buffer
	b.WriteString("date,reference,amount,balance\n")
	for i := 1; i <= n; i++ {
		bal = bal.Sub(amt)
		fmt.Fprintf(&b, "2026-11-30,po-01JF8Q3Z9W4K7M2N5P6R%06d,-%s,%s\n", i, amount, bal.StringFixed(2))
	}
	return b.Bytes(), bal
}

// Bounds of the heap an import grows by: a multiple of the file (the body
// as read, the request's text field and the parser's copy live together,
// and the collector lets the heap grow to twice what is live between
// cycles), and some per line (each line parsed, then a row of the COPY).
// Rewritten into its JSON form, escaped, read and unescaped again, a
// camt.053 of 48.6 MiB grew it by 723 to 852 MiB (the bound is 486; the
// file as the request's text, not copied again, 258).
const (
	uploadHeapPerFileMax = 8
	uploadHeapPerLineMax = 2 << 10
)

// peakHeap samples the heap in use until stop is called, and returns the
// highest sample above the heap in use when it started.
func peakHeap() (stop func() uint64) {
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	var peak atomic.Uint64
	done := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > base && ms.HeapInuse-base > peak.Load() {
				peak.Store(ms.HeapInuse - base)
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() uint64 { close(done); <-ended; return peak.Load() }
}

// A day's statement after a bank-file cut of 50 000 payouts (one debit
// entry each): as camt.053 and as CSV, each posted raw over REST, is
// imported whole, every line stored. Both were 413 (the statement upload
// had the 1 MiB limit of every other write: about 3 600 entries), and
// reconciliation never saw that day. A body over the upload's own limit
// is a 413 naming it, whether or not the client sent its length.
func TestRESTBankStatementOfAFullPayoutCut(t *testing.T) {
	f := newFixture(t, nil)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base, secret := startServer(t, f, func(o *server.Options) { o.GRPCListener = lis })
	tok, err := auth.Issue(secret, auth.RoleFinance, "", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	post := func(query, contentType string, body io.Reader) (int, []byte) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, base+"/v1/bank-statements"+query, body)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", contentType)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, b
	}

	xmlFile, xmlClosing := fullCutCamt053(payoutCutTransfersMax, "123.45")
	csvFile, csvClosing := fullCutCSV(payoutCutTransfersMax, "123.45")
	for _, tt := range []struct {
		name, id, query, contentType string
		file                         []byte
		closing                      decimal.Decimal
	}{
		{"camt.053", "STMT-CUT-20261130", "?currency=CNY", "application/xml", xmlFile, xmlClosing},
		{"csv", "st-cut-csv", "?statement_id=st-cut-csv&currency=CNY&account=CN-CLIENT-2", "text/csv", csvFile, csvClosing},
	} {
		stop := peakHeap()
		start := time.Now()
		code, body := post(tt.query, tt.contentType, bytes.NewReader(tt.file))
		took, peak := time.Since(start), stop()
		t.Logf("%s of %d entries, %.1f MiB (%d bytes an entry): HTTP %d in %s, heap in use at most %.0f MiB above its start",
			tt.name, payoutCutTransfersMax, float64(len(tt.file))/(1<<20), len(tt.file)/payoutCutTransfersMax, code, took.Round(time.Millisecond), float64(peak)/(1<<20))
		if code != http.StatusOK {
			t.Fatalf("%s: HTTP %d: %.300s", tt.name, code, body)
		}
		if most := uint64(uploadHeapPerFileMax*len(tt.file) + uploadHeapPerLineMax*payoutCutTransfersMax); peak > most {
			t.Errorf("%s: the import's heap grew %.0f MiB (%.1f times the file); want at most %.0f MiB (%d times the file, %d KiB a line)",
				tt.name, float64(peak)/(1<<20), float64(peak)/float64(len(tt.file)), float64(most)/(1<<20), uploadHeapPerFileMax, uploadHeapPerLineMax>>10)
		}
		var st struct {
			ID        string `json:"statement_id"`
			LineCount int    `json:"line_count"`
			Closing   string `json:"closing_balance"`
		}
		if err := json.Unmarshal(body, &st); err != nil || st.ID != tt.id || st.LineCount != payoutCutTransfersMax || st.Closing != tt.closing.StringFixed(2) {
			t.Fatalf("%s: %s (%v); want %s, %d lines, closing %s", tt.name, body, err, tt.id, payoutCutTransfersMax, tt.closing.StringFixed(2))
		}
		var n int
		var sum decimal.Decimal
		if err := f.pool.QueryRow(f.ctx, `select count(*), coalesce(sum(amount), 0) from ledger.bank_statement_lines where statement_id = $1`, tt.id).Scan(&n, &sum); err != nil {
			t.Fatal(err)
		}
		if want := decimal.RequireFromString("-123.45").Mul(decimal.NewFromInt(payoutCutTransfersMax)); n != payoutCutTransfersMax || !sum.Equal(want) {
			t.Fatalf("%s: %d lines stored summing to %s; want %d summing to %s", tt.name, n, sum, payoutCutTransfersMax, want)
		}
	}

	// Over gRPC, the same camt.053 again: the listener takes it (8 MiB
	// was its largest message), and answers the stored statement.
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(auth.BearerCreds(tok)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	stmts := ledgerv1.NewBankStatementServiceClient(conn)
	res, err := stmts.ImportBankStatement(f.ctx, &ledgerv1.ImportBankStatementRequest{Currency: "CNY", Content: string(xmlFile)})
	if err != nil || res.GetStatement().GetStatementId() != "STMT-CUT-20261130" || res.GetStatement().GetLineCount() != payoutCutTransfersMax {
		t.Fatalf("gRPC, the camt.053 again: %v, %v", res, err)
	}

	over := make([]byte, statementBodyBytesMax+1)
	copy(over, xmlFile)
	for i := len(xmlFile); i < len(over); i++ {
		over[i] = ' '
	}
	for _, tt := range []struct {
		name string
		body io.Reader
	}{
		{"with its length", bytes.NewReader(over)},
		{"chunked", io.MultiReader(bytes.NewReader(over))}, // hides the length
	} {
		code, body := post("?currency=CNY", "application/xml", tt.body)
		want := fmt.Sprintf("request body larger than %d bytes", statementBodyBytesMax)
		if code != http.StatusRequestEntityTooLarge || !strings.Contains(string(body), want) {
			t.Fatalf("one byte over the limit, %s: HTTP %d %.300s; want 413 %q", tt.name, code, body, want)
		}
	}
	_, err = stmts.ImportBankStatement(f.ctx, &ledgerv1.ImportBankStatementRequest{Currency: "CNY", Content: string(over)})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("gRPC, one byte over the limit: %v; want RESOURCE_EXHAUSTED", err)
	}
}
