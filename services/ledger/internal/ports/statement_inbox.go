package ports

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/bankinbox"
	"github.com/gpubill/gpubill/services/ledger/internal/app"
)

// StatementInbox imports the camt.053 statements a bank's SFTP client
// drops into Dir (GPUBILL_BANK_STATEMENT_INBOX_DIR) as payout reads its
// pain.002 and camt.054 (pkg/bankinbox): oldest name first, dot-named
// files skipped as unfinished; imported (or imported before, by upload or
// by the inbox: the same statement), to processed/; malformed, another
// file under a stored statement's id, or over Read's size limit, to
// rejected/ with a .error file saying why (counted once); unreadable or
// refused by the database for what it holds, left in place and tried
// again every pass (counted each time) while the files after it are read.
type StatementInbox struct {
	Dir        string
	Statements *app.Statements
	// Lock is the inbox's (StatementInboxLockKey): one replica reads it
	// at a time.
	Lock Locker
	// Read reads a file whole, refusing one over its limit
	// (bankinbox.ErrTooBig); not the upload's: a day's camt.053 of more
	// than 50 000 transfers passes 64 MiB.
	Read func(path string) (string, error)
	Tick time.Duration
	Log  *slog.Logger
}

// StatementInboxTick is how often the inbox is read (payout's bank
// inbox's tick).
const StatementInboxTick = 30 * time.Second

// Locker is a lock one replica holds at a time (pkg/pg
// SessionLock).
type Locker interface {
	// TryLock takes the lock unless another holds it (ok false);
	// release frees it.
	TryLock(ctx context.Context) (release func(), ok bool, err error)
}

// StatementInboxLockKey names the lock a replica holds while it reads the
// inbox. Two replicas reading it at once would each parse every file (a
// statement of hundreds of MiB held twice), and one's move to processed/
// would fail the other's read or move of the same file.
const StatementInboxLockKey = "gpubill.ledger.bank_statement_inbox"

// Run reads the inbox every Tick until ctx ends. A pass that fails (the
// database down) is logged and tried again at the next tick: its files
// stay in place.
func (in *StatementInbox) Run(ctx context.Context) error {
	tick := in.Tick
	if tick <= 0 {
		tick = StatementInboxTick
	}
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		if err := in.Scan(ctx); err != nil && ctx.Err() == nil {
			in.Log.Error("bank statement inbox", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Scan reads the inbox once if this replica takes its lock; if another
// holds it, that one is reading it, and this pass does nothing.
func (in *StatementInbox) Scan(ctx context.Context) error {
	if in.Dir == "" {
		return nil
	}
	release, mine, err := in.Lock.TryLock(ctx)
	if err != nil {
		return fmt.Errorf("bank statement inbox: %w", err)
	}
	if !mine {
		return nil
	}
	defer release()
	box := bankinbox.Inbox{Dir: in.Dir, What: "bank statement inbox", Import: in.importFile, Malformed: statementRefused,
		Failed: statementInboxFilesFailed, Rejected: statementInboxFilesRejected, Log: in.Log}
	return box.Scan(ctx)
}

// importFile reads the file at path and imports it through the upload's
// use case, recorded as imported by inbox:<name>.
func (in *StatementInbox) importFile(ctx context.Context, name, path string) error {
	content, err := in.Read(path)
	if err != nil {
		return bankinbox.Unreadable(err)
	}
	st, err := in.Statements.ImportCamt053(ctx, content, "inbox:"+bankinbox.StoredName(name))
	if err != nil {
		return err
	}
	in.Log.Info("bank statement inbox file imported", "file", bankinbox.StoredName(name), "statement_id", st.ID, "account", st.Account,
		"currency", st.Currency, "lines", st.LineCount)
	return nil
}

// statementRefused reports whether an import's error refuses the file for
// what it holds, whatever pass reads it: malformed (an upload's 400), or
// another file under a stored statement's id or the same file under
// another (409).
func statementRefused(err error) bool {
	var ie *apperr.InvalidError
	return errors.As(err, &ie) || errors.Is(err, apperr.ErrConflict)
}

// statementInboxFilesFailed counts the inbox statements left in place by a
// failure of their own, each attempt (every tick while it lasts).
var statementInboxFilesFailed = promauto.NewCounter(prometheus.CounterOpts{
	Name: "gpubill_bank_statement_inbox_files_failed_total",
	Help: "Bank statement inbox files not imported for a failure of their own (unreadable, or refused by the database), each attempt: " +
		"the file stays in the inbox and the files after it are read; the ledger log (bank statement inbox file not imported) says why.",
})

// statementInboxFilesRejected counts the inbox statements moved to
// rejected/ (each once): not a camt.053 the ledger reads whole, another
// file under a stored statement's id, or over the inbox's size limit.
// Reconciliation does not see their day until one is imported.
var statementInboxFilesRejected = promauto.NewCounter(prometheus.CounterOpts{
	Name: "gpubill_bank_statement_inbox_files_rejected_total",
	Help: "Bank statement inbox files moved to rejected/ (malformed, a conflict with a stored statement, or over the size limit; nothing " +
		"in them imported); the .error file beside each and the ledger log (bank statement inbox file rejected) say why.",
})
