package images

// NonRootBase stands in for a distroless static:nonroot base (which cannot
// be pulled here) under the images ko builds: what it offers a static Go
// binary, a passwd entry for user 65532, which runAsNonRoot in istio-aux's
// and Knative's manifests needs as a number. Push it before a `ko resolve`
// that names it as KO_DEFAULTBASEIMAGE.
var NonRootBase = Image{
	Ref: Registry + "/static:nonroot",
	Files: []File{{Path: "/etc/passwd", Mode: 0o644,
		Data: []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")}},
	User: "65532",
}
