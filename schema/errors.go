package schema

// ErrorCode is a stable class for a denial or failure. Records carry the class,
// never the free text that caused it.
type ErrorCode string

const (
	ErrPathOutsideScope   ErrorCode = "PATH_OUTSIDE_SCOPE"
	ErrToolNotAllowed     ErrorCode = "TOOL_NOT_ALLOWED"
	ErrSecretPath         ErrorCode = "SECRET_PATH"
	ErrScopeExpired       ErrorCode = "SCOPE_EXPIRED"
	ErrScopeRevoked       ErrorCode = "SCOPE_REVOKED"
	ErrApprovalRequired   ErrorCode = "APPROVAL_REQUIRED"
	ErrApprovalDenied     ErrorCode = "APPROVAL_DENIED"
	ErrUnattributed       ErrorCode = "UNATTRIBUTED"
	ErrResponseTooLarge   ErrorCode = "RESPONSE_TOO_LARGE"
	ErrUnsupportedVersion ErrorCode = "UNSUPPORTED_VERSION"
	ErrMalformedRequest   ErrorCode = "MALFORMED_REQUEST"
	ErrAuditSinkFull      ErrorCode = "AUDIT_SINK_UNAVAILABLE"
	ErrRootsPending       ErrorCode = "ROOTS_REFRESH_TIMEOUT"
	// ErrMethodNotAllowed: a message whose method the proxy's table does
	// not pass (in this protocol era and direction).
	ErrMethodNotAllowed ErrorCode = "METHOD_NOT_ALLOWED"
	// ErrPromptNotAllowed: prompts/get or completion/complete of a prompt
	// the scope's prompt_allowlist does not name.
	ErrPromptNotAllowed ErrorCode = "PROMPT_NOT_ALLOWED"
	// ErrCancelled: the client cancelled (notifications/cancelled) a
	// request the proxy had not forwarded yet; it never reached the server
	// and, as MCP asks, got no answer.
	ErrCancelled ErrorCode = "CANCELLED"
)
