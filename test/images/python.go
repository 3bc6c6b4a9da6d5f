package images

import "context"

// PythonRef is the training app installed as python (test/cmd/app's
// python mode): Kubeflow's examples run `python -u mnist.py` or
// `python -u train.py` and find it on PATH, so their manifests need no
// change but the image.
const PythonRef = Registry + "/python:dev"

// Python builds the python image: the test app at /usr/local/bin/python.
func Python(ctx context.Context, dir string) (Image, error) {
	return fromBinary(ctx, dir, "./test/cmd/app", PythonRef, "/usr/local/bin/python", nil)
}
