// Package payoutstack holds the tests of payout composed with the real
// ledger (and a Temporal dev server), as `gpubill dev` composes them: the
// payout paths, rail outages and killed workers, the bank-file rail against
// pkg/iso20022/fakebank, the Alipay rail and its top-up notifications
// against pkg/alipay/fakealipay, the WeChat Pay rail and its notifications
// against pkg/wechatpay/fakewechatpay, webhooks, REST polling and the payout_status_p99
// benchmark. They live in the edition that composes the services so that no
// service module requires another; payout.Service.TestHooks is what they
// reach inside payout.
package payoutstack
