// Package httpget is the one HTTP check the harness and the test app share:
// a GET that counts only a 200.
package httpget

import (
	"context"
	"fmt"
	"net/http"
)

// OK GETs url with client and fails unless the answer is 200.
func OK(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}
