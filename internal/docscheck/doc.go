// Package docscheck holds tests that keep the docs true to the code: the
// "Code layout" section of docs/design.md names every package of the
// module and no package that is gone; every relative link of the
// repository's Markdown pages leads to a file and, with a #fragment, to a
// heading or anchor there; and the README's "Dependencies" section says
// why each module go.mod requires directly is used. It has no code of its
// own; the tests ask the go tool for the module's packages and go.mod.
package docscheck
