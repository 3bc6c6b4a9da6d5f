package,version,licence,licence address (Unknown where it cannot be found offline: every text is in third-party-licenses.tar.gz)
{{range .}}{{.Name}},{{.Version}},{{.LicenseName}},{{.LicenseURL}}
{{end}}
