// Package internal holds what metalheal's controllers share and nobody else should import: condition
// matching, the unhealthy-budget arithmetic, remediation template instantiation and test helpers.
package internal
