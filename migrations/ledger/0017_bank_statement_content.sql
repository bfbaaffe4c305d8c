-- An import looks up the statements of the account holding the same file
-- (content_sha256): the same bytes under another statement id are refused,
-- naming the first (a retry named anew was stored twice, and its lines
-- stayed exceptions in every reconciliation run).

-- +goose Up
create index bank_statements_content on ledger.bank_statements (account, content_sha256);

-- +goose Down
drop index ledger.bank_statements_content;
