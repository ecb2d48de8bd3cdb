package serverlog

// UnsafeRuneForTest exposes unsafeRune.
var UnsafeRuneForTest = unsafeRune

// CopyClockForTest is Copy with the limiter's clock given.
var CopyClockForTest = copyClock
