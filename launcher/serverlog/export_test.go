package serverlog

// UnsafeRuneForTest exposes unsafeRune.
var UnsafeRuneForTest = unsafeRune
