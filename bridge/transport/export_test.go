package transport

// ConfFileOf is confFileOf for the package's external tests.
var ConfFileOf = confFileOf
