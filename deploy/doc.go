// Package deploy holds what runs QueueBox where users run services, and the
// tests that check it. It holds no code of the product.
//
//   - image/: the container image, FROM scratch: the static binary as its
//     entrypoint, the CA certificates, a user of its own (65532), the
//     version in its labels, and a HEALTHCHECK that runs `queuebox
//     healthcheck`. scripts/build-image.sh (`make image`) builds it with
//     podman without pulling anything. TestImage builds it, reads its
//     contents, runs it with the host's network against the test
//     PostgreSQL, delivers rows, stops it with SIGTERM in the middle of a
//     batch and checks that nothing is left claimed.
//   - helm/queuebox: the Helm chart. Its tests are in package deploy/helm,
//     apart from these, because Helm's SDK and the Kubernetes API types take
//     minutes to compile the first time.
//   - systemd/queuebox.service: the systemd unit. TestSystemdUnit checks
//     what it must hold (the command, restarts, a stop timeout above the
//     drain timeout, the sandbox), runs `systemd-analyze verify` on it, and
//     has `systemd-analyze security` rate its exposure; it skips those two
//     where systemd-analyze is not installed.
package deploy
