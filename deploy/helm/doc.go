// Package helm tests QueueBox's Helm chart (the folder queuebox/ beside
// this file) through Helm's Go SDK: it lints the chart, renders it as
// `helm install --dry-run` does with the least values a user gives and
// with every value changed (queuebox/ci/*.yaml), and decodes every rendered
// object strictly into its Kubernetes API type (k8s.io/api, and the
// Prometheus Operator's for the ServiceMonitor), so that a misspelt field
// fails. The configuration file the chart renders is loaded as `queuebox
// run` loads it. It holds tests only, in a package of their own: Helm's SDK
// and the Kubernetes types take minutes to compile the first time.
package helm
