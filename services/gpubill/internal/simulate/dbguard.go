package simulate

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gpubill/gpubill/pkg/pg"
)

// ErrForeignDatabase: gpubill dev --simulate runs only on a database no
// one but the simulation put parties or ledger history in.
var ErrForeignDatabase = errors.New("the database holds parties or ledger history the simulation did not create")

// CheckOwnDatabase refuses (ErrForeignDatabase) the database at dsn when
// it holds a renter or provider the simulation did not create (metering
// owns them), or ledger accounts of such a party: a production
// DATABASE_URL, on which gpubill dev --simulate would run the whole stack
// and book deposits no money stands behind. A database that does not exist
// yet, or whose schemas do not (a fresh machine), and one only an earlier
// simulation wrote (make run again) pass. It only reads, and creates
// nothing.
func CheckOwnDatabase(ctx context.Context, dsn string) error {
	pool, err := pg.OpenReadOnly(ctx, dsn, 1)
	if errors.Is(err, pg.ErrNoDatabase) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("check the database for parties the simulation did not create: %w", err)
	}
	defer pool.Close()
	own := ownNames()
	ids, names := make([]string, 0, len(own)), make([]string, 0, len(own))
	for id, name := range own {
		ids, names = append(ids, id), append(names, name)
	}
	checks := []struct {
		what, table, query string
		args               []any
	}{
		{"renters", "metering.renters", `select renter_id from metering.renters
			where (renter_id, name) not in (select * from unnest($2::text[], $3::text[])) order by renter_id limit $1`,
			[]any{ids, names}},
		{"providers", "metering.providers", `select provider_id from metering.providers
			where (provider_id, name) not in (select * from unnest($2::text[], $3::text[])) order by provider_id limit $1`,
			[]any{ids, names}},
		// A party's accounts (renter:{id}:…, provider:{id}:…): the ledger
		// alone on its database holds no party table.
		{"ledger accounts", "ledger.accounts", `select address from ledger.accounts
			where (address like 'renter:%' or address like 'provider:%') and split_part(address, ':', 2) <> all($2::text[])
			order by address limit $1`,
			[]any{ids}},
	}
	var found []string
	for _, c := range checks {
		got, err := foreignRows(ctx, pool, c.table, c.query, c.args)
		if err != nil {
			return fmt.Errorf("check %s for parties the simulation did not create: %w", c.table, err)
		}
		if len(got) > 0 {
			found = append(found, c.what+" "+strings.Join(got, ", "))
		}
	}
	if len(found) == 0 {
		return nil
	}
	cfg := pool.Config().ConnConfig
	return fmt.Errorf("%w (database %q on %s:%d: %s): the simulation books deposits no money stands behind, "+
		"so gpubill dev --simulate runs only on a database of its own; point DATABASE_URL at another database, "+
		"run gpubill dev without --simulate, or add --force to run anyway", ErrForeignDatabase, cfg.Database, cfg.Host, cfg.Port, strings.Join(found, "; "))
}

// foreignRows runs query (its $1 the row limit, then args) for the first
// foreignShowMax ids of table not the simulation's, with "…" when there
// are more; none if table does not exist.
func foreignRows(ctx context.Context, pool *pgxpool.Pool, table, query string, args []any) ([]string, error) {
	var exists bool
	if err := pool.QueryRow(ctx, `select to_regclass($1) is not null`, table).Scan(&exists); err != nil || !exists {
		return nil, err
	}
	rows, err := pool.Query(ctx, query, append([]any{foreignShowMax + 1}, args...)...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		got = append(got, id)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(got) > foreignShowMax {
		got = append(got[:foreignShowMax], "…")
	}
	return got, nil
}
