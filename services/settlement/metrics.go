package settlement

import "github.com/gpubill/gpubill/pkg/obs"

// Metrics implements svc.MetricsSource: settlement progress, read on scrape.
func (s *Service) Metrics() []obs.SQLMetric { return Metrics() }

// Metrics are the settlement service's business metrics. Only cycles not
// yet settled are listed per cycle, so the series stay few.
func Metrics() []obs.SQLMetric {
	// The page-level gauges first: a scrape's reads are bounded in all
	// (obs.SQLCollector), and behind the per-cycle figures (0.9–4.7 s at
	// 2 × 100 000 providers) they fell out of the scrape, their alerts blind.
	return []obs.SQLMetric{
		{
			// A held provider keeps its cycle closing on purpose; a cycle
			// still snapshotting, with pending (not held) settlements, or
			// with every settlement settled but not itself, is work the
			// workflows have not finished.
			Name: "gpubill_settlement_closing_stalled_seconds", Type: obs.Gauge, Labels: nil,
			Help: "Seconds since the oldest closing cycle with unfinished work (snapshot, pending settlements, or every settlement " +
				"settled but the cycle not marked settled) began closing; 0 when none.",
			Query: `select coalesce(max(extract(epoch from now() - c.closed_at)), 0)::float8 from settlement.cycles c
				where c.status = 'closing' and (not c.snapshot_done
					or exists (select 1 from settlement.settlements s where s.cycle_id = c.cycle_id and s.status = 'pending')
					or not exists (select 1 from settlement.settlements s where s.cycle_id = c.cycle_id and s.status <> 'settled'))`,
		},
		{
			// A cycle closes at its closes_at (its workflow's timer): one
			// still open past it has no run waiting for its close (ended or
			// stuck before it), which the closing gauge above cannot see.
			Name: "gpubill_settlement_open_past_close_seconds", Type: obs.Gauge, Labels: nil,
			Help: "Seconds since the close time (end plus grace) of the oldest cycle still open past it; 0 when none.",
			Query: `select coalesce(max(extract(epoch from now() - closes_at)), 0)::float8 from settlement.cycles
				where status = 'open' and closes_at < now()`,
		},
		{
			Name: "gpubill_settlement_cycles", Type: obs.Gauge, Labels: []string{"status"},
			Help:  "Settlement cycles by status (open, closing, settled).",
			Query: `select status, count(*)::float8 from settlement.cycles group by status`,
		},
		{
			Name: "gpubill_settlement_cycle_providers", Type: obs.Gauge, Labels: []string{"cycle_id", "status"},
			Help: "Provider settlements of each cycle not yet settled, by status (pending, held, settled): a closing cycle's progress.",
			Query: `select s.cycle_id, s.status, count(*)::float8 from settlement.settlements s
				join settlement.cycles c on c.cycle_id = s.cycle_id and c.status <> 'settled'
				group by s.cycle_id, s.status`,
		},
		{
			// The two latest cycles past their end: a settled cycle's
			// figures no longer change, and Prometheus keeps the history.
			Name: "gpubill_settlement_cycle_amount", Type: obs.Gauge, Labels: []string{"cycle_id", "currency", "part"},
			Help: "Money of the two latest closing or settled cycles, by currency and part (gross, commission, tax_withheld, net, " +
				"and gross_unsettled: the gross of the providers not settled yet), in currency units.",
			Query: `select s.cycle_id, s.currency, v.part, sum(v.amount)::float8
				from (select cycle_id from settlement.cycles where status <> 'open' order by ends_at desc limit 2) c
				join settlement.settlements s on s.cycle_id = c.cycle_id
				cross join lateral (values ('gross', s.gross), ('commission', s.commission), ('tax_withheld', s.tax_withheld), ('net', s.net),
					('gross_unsettled', case when s.net is null then s.gross else 0 end)) v(part, amount)
				where v.amount is not null
				group by s.cycle_id, s.currency, v.part`,
		},
		{
			// A sweep is deferred while bank:client cannot fund it (renters
			// on credit, a refund that emptied it); the hourly
			// settlement-commission-sweep sweeps it once it can. Until then
			// the commission (house money) is still in bank:client.
			Name: "gpubill_settlement_commission_unswept", Type: obs.Gauge, Labels: []string{"currency"},
			Help: "Commission of settled providers not yet swept from bank:client to bank:operating (deferred: bank:client " +
				"could not fund it; or conflicting or refused: the sweep conflicts and refused counters), by currency, in currency units; no series when none.",
			Query: `select currency, sum(commission)::float8 from settlement.settlements
				where status = 'settled' and commission > 0 and sweep_transaction_id = '' group by currency`,
		},
		{
			Name: "gpubill_settlement_commission_unswept_age_seconds", Type: obs.Gauge, Labels: []string{"currency"},
			Help: "Seconds since the oldest settlement whose commission sweep is still deferred settled, by currency; no series when none.",
			Query: `select currency, max(extract(epoch from now() - settled_at))::float8 from settlement.settlements
				where status = 'settled' and commission > 0 and sweep_transaction_id = '' group by currency`,
		},
	}
}
