// Package deploy holds no code. Its tests check the files under deploy/
// with the real tools: the systemd units with systemd-analyze (verify,
// security), the Helm chart rendered by helm and decoded strictly into the
// Kubernetes API types, the Grafana dashboard against the series the
// commands export and the data sources the compose file provisions.
//
// The tests that run those files against the real services live where
// the services' helpers are: collector/deploy_*_test.go (NATS, ClickHouse,
// the systemd units run by a real systemd manager).
package deploy
