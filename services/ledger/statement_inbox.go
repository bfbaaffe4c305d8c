package ledger

import (
	"context"
	"fmt"
	"os"

	"github.com/gpubill/gpubill/pkg/bankinbox"
	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/services/ledger/internal/ports"
)

// statementInboxEnv names the directory the bank's camt.053 statements
// are delivered to (its SFTP client's drop directory, shared by the
// replicas): GPUBILL_BANK_STATEMENT_INBOX_DIR. Unset, statements come by
// upload only (POST /v1/bank-statements).
const statementInboxEnv = "GPUBILL_BANK_STATEMENT_INBOX_DIR"

// statementInboxBytesMax bounds a statement read from the inbox: four
// times the upload's 64 MiB (pkg/server), a day of ~260 000 transfers of
// the bank's ~1 KiB debit entry. Not higher: an import's heap grows by
// about 2.4 times its file (65 MiB: 157 MiB, TestStatementInboxAboveThe-
// UploadLimit; the text, the parsed lines, the COPY's rows), ~620 MiB at
// this bound beside uploads of up to 64 MiB at five times theirs, under
// the ledger's 2 GiB (deploy/helm values); a file that killed the process
// would kill it again at every pass while it stays in the inbox. Over it,
// a file is moved to rejected/ and counted.
const statementInboxBytesMax = 256 << 20

// readStatementInboxFile reads an inbox file whole (tests make one fail,
// or lower the bound).
var readStatementInboxFile = func(path string) (string, error) {
	return bankinbox.ReadString(path, statementInboxBytesMax)
}

// WithStatementInbox reads the bank statement inbox in dir instead of
// GPUBILL_BANK_STATEMENT_INBOX_DIR's ("": none).
func WithStatementInbox(dir string) Option { return func(s *Service) { s.inboxDir = dir } }

// checkStatementInbox refuses an inbox that is not a directory: every
// pass would fail on it, logged, and the statements delivered elsewhere
// never imported.
func checkStatementInbox(dir string) error {
	if dir == "" {
		return nil
	}
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("%s: %w", statementInboxEnv, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("%s %s: not a directory", statementInboxEnv, dir)
	}
	return nil
}

// statementInbox is the inbox's reader.
func (s *Service) statementInbox() *ports.StatementInbox {
	return &ports.StatementInbox{Dir: s.inboxDir, Statements: s.statements, Read: readStatementInboxFile,
		Lock: pg.SessionLock{Pool: s.deps.Pool, Key: ports.StatementInboxLockKey},
		Log:  s.deps.Log.With("component", "bank-statement-inbox")}
}

// ScanStatementInbox reads the bank statement inbox once (Run reads it
// every 30 s).
func (s *Service) ScanStatementInbox(ctx context.Context) error { return s.statementInbox().Scan(ctx) }
