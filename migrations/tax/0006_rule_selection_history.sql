-- +goose Up
-- A rule set selection applies to the cycles that end after it was made: a
-- cycle is withheld under the selection in force at its end (the rule
-- version already was), so a selection made while a cycle settles no longer
-- splits that cycle's providers between two rule sets. Selections made
-- before this migration apply as they did, from the start of time.
alter table tax.rule_selections add column effective_from timestamptz not null default '-infinity';
alter table tax.rule_selections drop constraint rule_selections_pkey;
alter table tax.rule_selections add primary key (scope, effective_from);

-- +goose Down
delete from tax.rule_selections s where exists (select 1 from tax.rule_selections l
    where l.scope = s.scope and l.effective_from > s.effective_from);
alter table tax.rule_selections drop constraint rule_selections_pkey;
alter table tax.rule_selections add primary key (scope);
alter table tax.rule_selections drop column effective_from;
