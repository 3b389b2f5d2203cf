// Package deploy holds Corvo's deployment files — the Dockerfile, Docker
// Compose files and the Helm chart — and the test that checks them. It is
// its own module so that the test's dependencies (the Helm engine and the
// Kubernetes API types) stay out of the server's build.
package deploy
