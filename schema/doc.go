// Package schema holds the contracts every part of mcpwarden shares: the scope
// record, the event envelope, stable error classes and the keyed path hash.
// It depends on nothing else in this module.
package schema
