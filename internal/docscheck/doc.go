// Package docscheck holds tests that keep the docs true to the code: the
// "Code layout" section of docs/design.md names every package of the
// module, and names no package that is gone. It has no code of its own;
// the tests ask the go tool for the module's packages.
package docscheck
