package payout

import (
	"strings"

	"github.com/gpubill/gpubill/pkg/money"
	"github.com/gpubill/gpubill/pkg/obs"
	"github.com/gpubill/gpubill/services/payout/internal/adapters/alipay"
	"github.com/gpubill/gpubill/services/payout/internal/adapters/bankfile"
	"github.com/gpubill/gpubill/services/payout/internal/adapters/sandbox"
	"github.com/gpubill/gpubill/services/payout/internal/adapters/wechatpay"
	"github.com/gpubill/gpubill/services/payout/internal/app"
)

// The series GpubillPayoutRailAmountMismatch reads exist at 0 from the
// start, one per rail the service has (a series first seen at 1 is no
// increase to Prometheus). The bank-file rail's too: its status carries
// the amount finance resolved a transfer in review as paid at, and the
// first mismatch of the bank's paged nobody.
func init() {
	for _, rail := range []string{(&sandbox.Sandbox{}).Name(), alipay.Name, wechatpay.Name, bankfile.Name} {
		app.RailAmountMismatches(rail)
	}
}

// startMismatchSeries makes the mismatch series of every rail the router
// holds exist at 0, so a rail wired later than init's list is not missed.
func startMismatchSeries(r app.Router) app.Router {
	for _, rail := range r.RailNames() {
		app.RailAmountMismatches(rail)
	}
	return r
}

// Metrics implements svc.MetricsSource: payouts by status, read on scrape.
func (s *Service) Metrics() []obs.SQLMetric { return Metrics() }

// Metrics are the payout service's business metrics. A payout row per
// provider, cycle and currency: the group-by is bounded by the scrape's
// deadline (obs.SQLCollector).
func Metrics() []obs.SQLMetric {
	// Paged gauges first, the bank-file rail's next: a scrape's reads are
	// bounded in all (obs.SQLCollector); a slow group-by ahead hid them.
	ms := append(append(pagedMetrics(), bankFileMetrics()...), kycRejectedMetrics()...)
	return append(append(ms, []obs.SQLMetric{{
		// A payout flagged rail_amount_mismatch has its answer (the rail
		// holds another amount) and its own alert until finance resolves
		// it (gpubill_payout_rail_amount_flags_open_age_seconds): counted
		// here it fired GpubillPayoutInFlightLong too, telling finance to
		// ask the rail. Resolved, it is its workflow's to record paid: in
		// flight again, from the resolution (its last change).
		Name: "gpubill_payout_in_flight_age_seconds", Type: obs.Gauge,
		//
		// A payout whose bank transfer a payout hold (or its provider's KYC
		// rejected) keeps queued waits for finance, not for its rail: not
		// counted while held; the release is its last change (its history
		// notes it).
		Help: "Age of the oldest payout submitted or in transit since its last status change, not counting those flagged " +
			"rail_amount_mismatch and not resolved, nor those whose queued bank transfer a payout hold or a rejected KYC keeps out of the bank " +
			"file (0: none): a rail that never answers with an outcome.",
		Query: `select coalesce(extract(epoch from now() - min(p.updated_at)), 0)::float8 from payout.payouts p
			where p.status in ('submitted', 'in_transit') and (p.failure_code <> 'rail_amount_mismatch' or exists (
				select 1 from payout.rail_amount_flags f
				where f.payout_id = p.payout_id and f.attempt = p.attempt and f.resolved_at is not null))
			  and not exists (select 1 from payout.bank_transfers t where t.provider_id = p.provider_id and t.reference = p.rail_reference
				and t.state = 'queued' and (exists (select 1 from payout.holds h where h.provider_id = t.provider_id)
					or exists (select 1 from payout.kyc k where k.provider_id = t.provider_id and k.status = 'rejected')))`,
	}, {
		// GpubillPayoutRailAmountMismatch is a rise over an hour: it
		// clears an hour after the flag, and a flag finance never
		// resolves (its payout submitted for ever, its net in
		// in_transit) had no standing alert. A flag whose payout moved
		// on (the rail failed the reference, a retry) is closed by that.
		Name: "gpubill_payout_rail_amount_flags_open_age_seconds", Type: obs.Gauge,
		Help: "Age of the oldest rail_amount_mismatch flag finance has not resolved whose payout is still flagged (0: none): " +
			"compare the rail's bill and POST /v1/payouts/{payout_id}:resolve-amount-mismatch.",
		Query: `select coalesce(extract(epoch from now() - min(f.flagged_at)), 0)::float8 from payout.rail_amount_flags f
			join payout.payouts p on p.payout_id = f.payout_id and p.attempt = f.attempt
			where f.resolved_at is null and p.failure_code = 'rail_amount_mismatch' and p.status in ('submitted', 'in_transit')`,
	}, {
		// Claims a payout holds on an entry another claim of the same
		// entry, typed in another letter case, held first: marked by
		// migration payout/0037 (case_duplicate_of), which could not
		// make them unique. Each is a payout read paid by an entry that
		// pays another payout too, or counted twice towards its own net.
		Name: "gpubill_payout_settled_outside_case_duplicates", Type: obs.Gauge,
		Help: "Settled-outside claims marked case_duplicate_of by migration payout/0037: the same ledger entry, typed in another " +
			"letter case, already settles the payout it names (select payout_id, transaction_id, case_duplicate_of from " +
			"payout.settled_outside where case_duplicate_of is not null).",
		Query: `select count(*)::float8 from payout.settled_outside where case_duplicate_of is not null`,
	}, {
		Name: "gpubill_payouts", Type: obs.Gauge, Labels: []string{"status", "currency"},
		Help:  "Payouts by current status and currency (failed and returned ones wait for finance's retry).",
		Query: `select status, currency, count(*)::float8 from payout.payouts group by status, currency`,
	}, {
		// A payout that joined a later one (absorbed_into) is canceled and
		// its net is in that one's: counted twice, 60.00 read as canceled
		// money stranded in available beside the 180.00 paid that held it.
		Name: "gpubill_payout_amount", Type: obs.Gauge, Labels: []string{"status", "currency"},
		Help: "Net amount of the payouts by current status and currency, in currency units (a payout that joined a later one " +
			"counts in that one).",
		Query: `select status, currency, sum(net)::float8 from payout.payouts where absorbed_into = '' group by status, currency`,
	}}...), webhookMetrics()...)
}

// pagedMetrics are the payout gauges a page reads (Metrics reads them first).
func pagedMetrics() []obs.SQLMetric {
	return []obs.SQLMetric{{
		// Past the gate, a submission a rail keeps refusing as malformed
		// (gpubill's key, serial or permission) is retried, logged, for
		// ever: the payout stays created with its net in in_transit, and
		// nothing but the log showed it. Every marking sets
		// submitting_since (migration payout/0020's trigger): min() skips
		// a NULL, and the payout marked without one read 0.
		Name: "gpubill_payout_submitting_age_seconds", Type: obs.Gauge,
		Help:  "Age of the oldest payout being submitted to its rail (past the gate, no answer of the rail taken yet; 0: none).",
		Query: `select coalesce(extract(epoch from now() - min(submitting_since)), 0)::float8 from payout.payouts where status = 'created' and submitting`,
	}, {
		// The starter starts a payout's workflow after writing its row (a
		// new payout, a retry, a restore): while Temporal refuses, the
		// payout waits moved by nothing, and only the starter's WARN log
		// said so. updated_at is the attempt's last change: nothing but its
		// workflow changes a payout after it is written unstarted. The
		// partial index payouts_unstarted holds just these rows.
		Name: "gpubill_payout_workflow_unstarted_age_seconds", Type: obs.Gauge,
		Help: "Age of the oldest payout whose workflow has not been started, since its last change (0: none): the starter cannot " +
			"start workflows on Temporal.",
		Query: `select coalesce(extract(epoch from now() - min(updated_at)), 0)::float8 from payout.payouts where not workflow_started`,
	}, {
		// A payout canceled in the bank-file queue has its amount posted
		// back to available after the cancel's commit (the transfer leaves
		// the queue first): the ledger down, or the process gone in
		// between, it read canceled while its net stayed in in_transit,
		// counted by no gauge (in flight counts submitted and in transit
		// only). Its workflow posts it again within a poll; one whose
		// workflow is gone left it there for good. updated_at is the
		// cancel: nothing changes a canceled payout's status after it.
		// One canceled before migration payout/0026 ages from the
		// upgrade (cancel_unposted_since, migration payout/0029): from
		// its cancel, weeks ago, it paged at the upgrade's first scrape,
		// before its restarted workflow posted. The partial index
		// payouts_cancel_unposted holds just these rows.
		Name: "gpubill_payout_cancel_unposted_age_seconds", Type: obs.Gauge,
		Help: "Age of the oldest payout canceled in the bank-file queue whose amount the ledger has not taken back from in_transit " +
			"to available, since its cancel (one canceled before this was measured: since the upgrade that began measuring it; 0: none).",
		Query: `select coalesce(extract(epoch from now() - min(coalesce(cancel_unposted_since, updated_at))), 0)::float8 from payout.payouts
			where status = 'canceled' and rail_reference <> '' and cancel_posted_at is null`,
	}}
}

// webhookMetrics are the webhook sender's.
func webhookMetrics() []obs.SQLMetric {
	return []obs.SQLMetric{{
		// Receivers that hang held the webhook sender's slots and every
		// other provider's notices waited, seen by nobody. Due and the
		// earliest pending of its webhook and payout: what the sender
		// could claim now (ClaimDeliveries' order). A claimed one is due
		// at its lease's end, one in backoff at its next attempt; a
		// removed webhook's is never claimed.
		//
		// The sender's own backlog: a webhook whose receiver did not
		// answer its last attempt rests, its queue due and waiting, and
		// one receiver down with 100 payouts queued read as the sender
		// behind while every other provider's notices flowed
		// (gpubill_payout_webhooks_unanswered counts those). Its row
		// says so (unanswered_at), not the process's memory: every
		// replica's scrape agrees. One not tried for 10 minutes (twice
		// the longest rest, 5 min) counts again: the sender stopped
		// trying it.
		Name: "gpubill_payout_webhook_delivery_lag_seconds", Type: obs.Gauge,
		Help: "How long the oldest payout webhook delivery the sender could send now has been due, not counting webhooks whose " +
			"receiver did not answer its last attempt in the last 10 minutes (0: none): a backlog holds the sender's slots, or it stopped.",
		Query: `select coalesce(extract(epoch from now() - min(d.next_attempt_at)), 0)::float8 from payout.webhook_deliveries d
			where d.status = 'pending' and d.next_attempt_at <= now() and not exists (select 1 from payout.webhook_deliveries e
				where e.webhook_id = d.webhook_id and e.payout_id = d.payout_id and e.status = 'pending' and e.delivery_id < d.delivery_id)
				and not exists (select 1 from payout.webhooks w where w.webhook_id = d.webhook_id
					and (w.deleted_at is not null or w.unanswered_at > now() - interval '10 minutes'))`,
	}, {
		// A receiver that does not answer is its provider's to fix (its
		// delivery log shows each timeout); its deliveries wait, not
		// counted in the lag, and one given up after 3 days opens
		// GpubillPayoutWebhookGivenUp.
		//
		// Of the webhooks in use only: GpubillPayoutWebhooksMostUnanswered
		// reads it as a share of them, and receivers down for good whose
		// providers have had no payout since (never cleared: nothing is
		// sent to them) read as most webhooks not answering.
		Name: "gpubill_payout_webhooks_unanswered", Type: obs.Gauge,
		Help: "Payout webhooks in use (gpubill_payout_webhooks_in_use) whose receiver did not answer their last attempt (a timeout, " +
			"a refused connection): their deliveries wait and are not counted in gpubill_payout_webhook_delivery_lag_seconds.",
		Query: `select count(*)::float8 from payout.webhooks w where w.unanswered_at is not null and ` + webhookInUse,
	}, {
		// gpubill's own network or DNS broken, every receiver looks dead:
		// each is left out of the lag and counted unanswered, and no
		// provider is told of a payout paid or returned. The unanswered
		// count is read as a share of these. Counted by the providers'
		// changes (a delivery queued, or sent again on request), not by
		// the sender's attempts: a dead receiver retried every hour for 3
		// days counts once, like a healthy one told once, and two dead
		// ones are not most of a quiet night's sends.
		Name: "gpubill_payout_webhooks_in_use", Type: obs.Gauge,
		Help: "Payout webhooks not removed with a delivery queued (or sent again on request) in the last 7 days: what " +
			"gpubill_payout_webhooks_unanswered is a share of.",
		Query: `select count(*)::float8 from payout.webhooks w where ` + webhookInUse,
	}}
}

// webhookInUse is a webhook in use (payout.webhooks w): not removed, a
// delivery queued or sent again in the last 7 days. Longer than a
// delivery's 3-day retry window: every webhook the sender still tries is
// in use.
const webhookInUse = `w.deleted_at is null and exists (select 1 from payout.webhook_deliveries d
	where d.webhook_id = w.webhook_id and greatest(d.created_at, d.redelivered_at) > now() - interval '7 days')`

// bankFileMetrics are the bank-file rail's.
func bankFileMetrics() []obs.SQLMetric {
	return []obs.SQLMetric{{
		// The bank-file rail's loop logs a cutoff it cannot build, a file it
		// cannot deliver and an inbox file it cannot read, and tries again:
		// these ages are what an alert reads (every bank payout read
		// submitted while no money moved).
		//
		// A transfer of a provider finance holds is left queued by every
		// cut: not counted while held (its payout says it is held), and
		// counted from the release (hold_released_at), not from when it
		// was queued days before. Likewise one of a provider whose KYC
		// finance rejected (postgres.Store.PutKYC).
		Name: "gpubill_bank_transfers_queued_age_seconds", Type: obs.Gauge,
		Help: "Age of the oldest bank transfer queued for a cutoff and not in a batch yet, since it was queued or its provider's " +
			"payout hold or KYC rejection was released, not counting those a payout hold or a rejected KYC keeps queued (0: none); past a day a cutoff was not built.",
		Query: `select coalesce(extract(epoch from now() - min(greatest(t.queued_at, t.hold_released_at))), 0)::float8 from payout.bank_transfers t
			where t.state = 'queued' and not exists (select 1 from payout.holds h where h.provider_id = t.provider_id)
			  and not exists (select 1 from payout.kyc k where k.provider_id = t.provider_id and k.status = 'rejected')`,
	}, {
		Name: "gpubill_bank_batches_undelivered_age_seconds", Type: obs.Gauge,
		Help:  "Age of the oldest bank batch built and not written to the outbox directory yet (0: none).",
		Query: `select coalesce(extract(epoch from now() - min(created_at)), 0)::float8 from payout.bank_batches where delivered_at is null`,
	}, {
		Name: "gpubill_bank_transfers_unsettled_age_seconds", Type: obs.Gauge,
		// From the batch's execution date when later: holidays push it
		// out (a cut on 30 September executes on 8 October), and the bank
		// books nothing before it.
		Help: "Age of the oldest bank transfer sent to the bank (batched or accepted) whose booking or rejection has not been imported, " +
			"counted from its last change or its batch's execution date (midnight UTC), whichever is later (0: none): the bank's files " +
			"are not reaching the inbox, or one blocks it.",
		Query: `select greatest(coalesce(extract(epoch from now() - min(greatest(t.updated_at, b.execution_date::timestamp at time zone 'UTC'))), 0), 0)::float8
			from payout.bank_transfers t left join payout.bank_batches b on b.batch_id = t.batch_id where t.state in ('batched', 'accepted')`,
	}, {
		// A restore or a recovery holds the rail; its loop says so once
		// in the log, and bank payouts wait until finance releases it.
		Name: "gpubill_bank_files_held_age_seconds", Type: obs.Gauge,
		Help: "How long the bank-file rail has been held by a restore or a recovery (no batch cut or delivered until finance " +
			"releases it: POST /v1/bank-files:release-restore-hold; 0: not held).",
		Query: `select coalesce(extract(epoch from now() - min(held_since)), 0)::float8 from payout.bank_file_holds where released_at is null`,
	}, {
		// A transfer held for review after a restore is sent to no bank
		// until finance resolves it: its payout reads submitted meanwhile.
		Name: "gpubill_bank_transfers_review_age_seconds", Type: obs.Gauge,
		Help: "Age of the oldest bank transfer held for finance's review (0: none): after a restore the bank has it, or may have it, " +
			"under terms the rail cannot apply, and it is never sent until resolved (GET /v1/bank-files/restore-hold lists them; " +
			"POST /v1/bank-transfers/{end_to_end_id}:resolve).",
		Query: `select coalesce(extract(epoch from now() - min(since)), 0)::float8 from payout.bank_transfer_reviews where resolved_at is null`,
	}, {
		Name: "gpubill_bank_transfers", Type: obs.Gauge, Labels: []string{"state", "currency"},
		Help: "Transfers on the bank-file rail by state: queued for the next cutoff, batched (in a pain.001), accepted, booked, rejected, " +
			"returned, review (held for finance after a restore), canceled (taken out of the queue by the cancel of its payout).",
		Query: `select state, currency, count(*)::float8 from payout.bank_transfers group by state, currency`,
	}, {
		Name: "gpubill_bank_file_entries_not_applied", Type: obs.Gauge, Labels: []string{"outcome"},
		Help: "Entries of imported bank files (pain.002, camt.054) not applied — unknown EndToEndId, a status contradicting what is known, " +
			"an amount not the payout's, a transfer queued again after a restore held for review, a status of a batch lost with a restore, " +
			"a camt.054 entry on the client account too malformed to read (the file's other entries applied) — " +
			"for finance to look at (GET the import's answer, or the log).",
		// Every outcome from 0: with no series before the first entry,
		// the alert's rise over an hour had nothing to rise from and
		// missed it.
		Query: `select o.outcome, count(e.outcome)::float8
			from unnest(array['unknown_reference', 'conflict', 'amount_mismatch', 'review', 'lost_batch', 'unreadable']) as o(outcome)
			left join payout.bank_file_entries e on e.outcome = o.outcome group by o.outcome`,
	}}
}

// kycRejectedMetrics are the bank transfers a rejected KYC keeps queued.
func kycRejectedMetrics() []obs.SQLMetric {
	return []obs.SQLMetric{{
		// Counted by neither the queued nor the in-flight age: a
		// transfer a rejected KYC keeps queued waits for finance's
		// verdict, not for a cutoff. Its net stays in
		// provider:{id}:in_transit meanwhile, out of every bank file,
		// and nothing showed it: finance changes the verdict (the next
		// file takes it) or cancels the payout (its net back in
		// available). From the rejection, or the queuing if later: the
		// rejection's first save (rejected_at), not its last (updated_at),
		// or finance re-saving it daily kept the age under a day for ever.
		Name: "gpubill_payout_kyc_rejected_queued_age_seconds", Type: obs.Gauge,
		Help: "Age of the oldest bank transfer kept queued, out of every bank file, by its provider's KYC rejected by finance, since " +
			"the rejection (its first save: saving it again does not restart it) or its queuing, whichever is later (0: none): " +
			"its payout's net waits in provider:{id}:in_transit.",
		Query: `select coalesce(extract(epoch from now() - min(greatest(t.queued_at, k.rejected_at))), 0)::float8 from payout.bank_transfers t
			join payout.kyc k on k.provider_id = t.provider_id and k.status = 'rejected' where t.state = 'queued'`,
	}, {
		// Every currency from 0: a series first seen when finance
		// rejects a provider is no series before it.
		Name: "gpubill_payout_kyc_rejected_queued_amount", Type: obs.Gauge, Labels: []string{"currency"},
		Help: "Amount of the bank transfers kept queued by their provider's KYC rejected by finance, by currency, in currency units: " +
			"money held in provider in_transit accounts while nothing is sent.",
		Query: `select c.currency, coalesce(sum(t.amount), 0)::float8 from unnest(array['` + strings.Join(money.Codes(), `', '`) + `']) as c(currency)
			left join (payout.bank_transfers t join payout.kyc k on k.provider_id = t.provider_id and k.status = 'rejected' and t.state = 'queued')
				on t.currency = c.currency group by c.currency`,
	}}
}
