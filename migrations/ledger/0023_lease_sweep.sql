-- Lease control's sweep (app.LeaseControl.Sweep, every minute) evaluates
-- again the wallets a lost ledger.posted.renter message left where they
-- were. It read the oldest thousand stops: a wallet that stays stopped is
-- never written again, so with a thousand abandoned renters stopped at 0 it
-- read the same ones every minute, and a renter stopped later who topped
-- up stayed stopped. It now selects only the stopped wallets with money to
-- spend, reading the stopped ones (lease_control_stopped), and the wallets
-- charged in the last ten minutes with nothing left to spend that are not
-- stopped, reading those minutes of wallet_burn (wallet_burn_minute). An
-- update of a wallet_burn minute changes its amount only, so it stays a
-- heap-only update (migration 0015); a wallet's new minute adds one entry.

-- +goose Up
create index lease_control_stopped on ledger.lease_control (updated_at) where state = 'stopped';
create index wallet_burn_minute on ledger.wallet_burn (minute);

-- +goose Down
drop index ledger.wallet_burn_minute;
drop index ledger.lease_control_stopped;
