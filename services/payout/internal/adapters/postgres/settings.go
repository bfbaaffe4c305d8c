package postgres

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// Settings returns the payout settings set through the API, by name.
func (s *Store) Settings(ctx context.Context) (map[string]string, error) {
	return settings(ctx, s.Pool)
}

type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

func settings(ctx context.Context, q querier) (map[string]string, error) {
	rows, err := q.Query(ctx, `select setting, value from payout.settings`)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	var k, v string
	_, err = pgx.ForEachRow(rows, []any{&k, &v}, func() error { out[k] = v; return nil })
	return out, err
}

// minimums is min with the minimums set through the API over it, read in tx.
func minimums(ctx context.Context, tx pgx.Tx, min domain.Minimums) (domain.Minimums, error) {
	set, err := settings(ctx, tx)
	if err != nil {
		return nil, err
	}
	return min.With(set)
}

// PutSettings applies changes (setting → value; "" deletes it: back to the
// environment default) in one transaction, keeping each change that
// changes something in the history with actor and reason. It returns the
// changes made.
func (s *Store) PutSettings(ctx context.Context, changes map[string]string, actor, reason string, at time.Time) ([]domain.SettingChange, error) {
	var done []domain.SettingChange
	err := s.Tx(ctx, func(tx pgx.Tx) error {
		done = done[:0]
		names := make([]string, 0, len(changes))
		for k := range changes {
			names = append(names, k)
		}
		slices.Sort(names) // one lock order
		for _, k := range names {
			v := changes[k]
			var old string
			err := tx.QueryRow(ctx, `select value from payout.settings where setting = $1 for update`, k).Scan(&old)
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return err
			}
			if old == v {
				continue
			}
			if v == "" {
				_, err = tx.Exec(ctx, `delete from payout.settings where setting = $1`, k)
			} else {
				_, err = tx.Exec(ctx, `insert into payout.settings (setting, value, updated_at, updated_by) values ($1, $2, $3, $4)
					on conflict (setting) do update set value = excluded.value, updated_at = excluded.updated_at, updated_by = excluded.updated_by`,
					k, v, at, actor)
			}
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `insert into payout.settings_history (setting, old_value, new_value, actor, reason, at)
				values ($1, nullif($2, ''), nullif($3, ''), $4, $5, $6)`, k, old, v, actor, reason, at); err != nil {
				return err
			}
			done = append(done, domain.SettingChange{Setting: k, Old: old, New: v, Actor: actor, Reason: reason, At: at})
		}
		return nil
	})
	return done, err
}

// SettingChanges lists the latest changes, newest first.
func (s *Store) SettingChanges(ctx context.Context, limit int) ([]domain.SettingChange, error) {
	rows, err := s.Pool.Query(ctx, `select setting, coalesce(old_value, ''), coalesce(new_value, ''), actor, reason, at
		from payout.settings_history order by seq desc limit $1`, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (domain.SettingChange, error) {
		var c domain.SettingChange
		return c, r.Scan(&c.Setting, &c.Old, &c.New, &c.Actor, &c.Reason, &c.At)
	})
}

// WaitingInCurrencies lists the payouts waiting (action_required) in the
// currencies, to wake after a minimum changed.
func (s *Store) WaitingInCurrencies(ctx context.Context, currencies []string) ([]string, error) {
	rows, err := s.Pool.Query(ctx, `select payout_id from payout.payouts where status = $1 and currency = any($2)`,
		domain.StatusActionRequired, currencies)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}
