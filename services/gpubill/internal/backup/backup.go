// Package backup takes and restores consistent snapshots of the gpubill
// database: every schema, dumped by PostgreSQL's own pg_dump (directory
// format) inside one exported REPEATABLE READ snapshot, with a manifest of
// what that same snapshot held (journal head hash, per-currency totals, a
// digest of every balance, row counts of every table). Restore loads a
// snapshot into an empty database with pg_restore and proves it against the
// manifest before anything may use it.
//
// The JetStream store is not part of a snapshot: see Take.
package backup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/services/ledger"
)

// Layout of a snapshot directory.
const (
	ManifestFile  = "manifest.json" // written last: its presence marks a complete snapshot
	DumpDir       = "pgdump"        // pg_dump --format=directory
	FormatVersion = 1
	partialSuffix = ".partial"
	dumpJobs      = 2
	// PGBinDefault holds the PostgreSQL client tools matching the server
	// gpubill is developed against; GPUBILL_PG_BIN (Tools.BinDir) overrides.
	PGBinDefault = "/usr/lib/postgresql/15/bin"
)

// Manifest describes a snapshot: when it was taken and what it held, all
// read in the snapshot pg_dump copied.
type Manifest struct {
	Format        int            `json:"format"`
	CreatedAt     time.Time      `json:"created_at"`
	Database      string         `json:"database"`
	ServerVersion string         `json:"server_version"`
	Ledger        ledger.Figures `json:"ledger"`
	// Tables are the row counts of every table of every non-system schema.
	Tables map[string]int64 `json:"tables"`
}

// Tools locates pg_dump and pg_restore: BinDir if set, else PGBinDefault if
// it exists, else $PATH.
type Tools struct{ BinDir string }

func (t Tools) path(name string) (string, error) {
	for _, dir := range []string{t.BinDir, PGBinDefault} {
		if dir == "" {
			continue
		}
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		if dir == t.BinDir {
			return "", fmt.Errorf("%s not found in %s (GPUBILL_PG_BIN)", name, dir)
		}
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%s not found in %s or $PATH (install the PostgreSQL client tools or set GPUBILL_PG_BIN): %w", name, PGBinDefault, err)
	}
	return p, nil
}

// runOn runs the tool name on the database at dsn (appended as --dbname),
// its password, if dsn holds one, in PGPASSWORD rather than on the command
// line, where ps would show it for the whole dump.
func (t Tools) runOn(ctx context.Context, name, dsn string, args ...string) error {
	bin, err := t.path(name)
	if err != nil {
		return err
	}
	rest, password, err := splitPassword(dsn)
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, bin, append([]string{"--dbname=" + rest}, args...)...)
	if password != "" {
		cmd.Env = append(os.Environ(), "PGPASSWORD="+password)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", name, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Take writes a snapshot of the database at dsn into dir (which must not
// exist, or be empty): pg_dump of every schema and the manifest, both from
// one REPEATABLE READ snapshot, so the manifest describes exactly what was
// copied. It is written under dir.partial and renamed when complete;
// failed, dir.partial is removed: the schedule retries under a new name,
// and each failure (a full disk, most likely) left its partial dump behind.
//
// JetStream is not copied. What a restored stack needs from it is in
// Postgres: every event a service publishes is first written to its
// outbox in the transaction that made it, every consumer records the
// message ids it applied (its inbox) in the transaction that applied them,
// and Restore puts the outbox messages published in the retention window
// back into the outboxes (see RequeueOutboxes), whose relays publish them
// again into the new store, where the consumers' inboxes skip those
// already applied in the snapshot.
func Take(ctx context.Context, dsn, dir string, tools Tools, now time.Time) (_ *Manifest, err error) {
	if err := mustBeEmptyDir(dir); err != nil {
		return nil, err
	}
	partial := strings.TrimRight(dir, string(filepath.Separator)) + partialSuffix
	if err := os.RemoveAll(partial); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(partial, 0o700); err != nil {
		return nil, fmt.Errorf("backup dir: %w", err)
	}
	defer func() {
		if err == nil {
			return
		}
		if rmErr := os.RemoveAll(partial); rmErr != nil {
			err = errors.Join(err, fmt.Errorf("remove the partial backup: %w", rmErr))
		}
	}()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, fmt.Errorf("begin snapshot: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	var snapshot string
	m := &Manifest{Format: FormatVersion, CreatedAt: now.UTC(), Database: conn.Config().Database}
	if err := tx.QueryRow(ctx, `select pg_export_snapshot(), current_setting('server_version')`).Scan(&snapshot, &m.ServerVersion); err != nil {
		return nil, fmt.Errorf("export snapshot: %w", err)
	}
	// A restore's load is kept until its verification and last step: a
	// snapshot of it would verify and restore as if it were ready.
	if err := pg.RestoreFinished(ctx, tx); err != nil {
		return nil, err
	}
	if m.Ledger, err = ledger.ReadFigures(ctx, tx); err != nil {
		return nil, fmt.Errorf("ledger figures: %w", err)
	}
	if m.Tables, err = tableCounts(ctx, tx); err != nil {
		return nil, err
	}
	if err := tools.runOn(ctx, "pg_dump", dsn, "--format=directory", fmt.Sprintf("--jobs=%d", dumpJobs), "--snapshot="+snapshot,
		"--no-owner", "--no-privileges", "--file="+filepath.Join(partial, DumpDir)); err != nil {
		return nil, err
	}
	if err := writeManifest(filepath.Join(partial, ManifestFile), m); err != nil {
		return nil, err
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	if err := os.Rename(partial, dir); err != nil {
		return nil, fmt.Errorf("complete backup: %w", err)
	}
	return m, nil
}

// tableCounts counts the rows of every table outside the system schemas but
// the mark of an unfinished restore (the restore verifies its load with it).
func tableCounts(ctx context.Context, tx pgx.Tx) (map[string]int64, error) {
	rows, err := tx.Query(ctx, `select schemaname, tablename from pg_tables
		where schemaname not in ('pg_catalog', 'information_schema') and schemaname not like 'pg\_%'
		and not (schemaname = 'public' and tablename = $1)
		order by 1, 2`, pg.RestorePendingTable)
	if err != nil {
		return nil, fmt.Errorf("list tables: %w", err)
	}
	var names []pgx.Identifier
	for rows.Next() {
		var s, t string
		if err := rows.Scan(&s, &t); err != nil {
			return nil, err
		}
		names = append(names, pgx.Identifier{s, t})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list tables: %w", err)
	}
	out := make(map[string]int64, len(names))
	for _, n := range names {
		var c int64
		if err := tx.QueryRow(ctx, "select count(*) from "+n.Sanitize()).Scan(&c); err != nil {
			return nil, fmt.Errorf("count %s: %w", n.Sanitize(), err)
		}
		out[n[0]+"."+n[1]] = c
	}
	return out, nil
}

func mustBeEmptyDir(dir string) error {
	if dir == "" {
		return errors.New("no backup directory given")
	}
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if len(ents) > 0 {
		return fmt.Errorf("%s exists and is not empty: a backup goes into a new directory", dir)
	}
	return nil
}

func writeManifest(path string, m *Manifest) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// ReadManifest reads a snapshot's manifest; a directory without one is not
// a (complete) gpubill snapshot.
func ReadManifest(dir string) (*Manifest, error) {
	b, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%s is not a complete gpubill backup (no %s)", dir, ManifestFile)
	}
	if err != nil {
		return nil, err
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, ManifestFile), err)
	}
	if m.Format != FormatVersion {
		return nil, fmt.Errorf("%s: format %d, this gpubill reads format %d", filepath.Join(dir, ManifestFile), m.Format, FormatVersion)
	}
	return &m, nil
}
