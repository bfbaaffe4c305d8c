package app

import "github.com/jackc/pgx/v5/pgxpool"

// reportDeps is the database report.go reads the books from until it uses
// Store's report queries (ChainHead, CurrencyTotals, TxIDsTouching,
// LoadTransactions) like every other use case; its rewrite is under way.
// It is the only database import left in this package.
type reportDeps struct{ Pool *pgxpool.Pool }
