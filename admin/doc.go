// Package admin will hold the admin listener (spec/operations.md): /healthz,
// /readyz, /metrics, the JSON API and the web page. The admin.listen and
// admin.token keys are read and validated already; until the listener
// arrives, `queuebox status` and the logs are the operator's view.
package admin
