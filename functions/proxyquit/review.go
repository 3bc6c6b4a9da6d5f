package proxyquit

import (
	"context"
	"encoding/json"
	"fmt"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// APIServerReviewer reviews tokens with the API server c talks to (the
// caller needs create on tokenreviews). It returns the review's whole
// status: whether the token is honoured for the function's audience is the
// authenticator's to judge, from status.audiences (judgeReview).
func APIServerReviewer(c rest.Interface) Reviewer { return apiServerReviewer{c} }

type apiServerReviewer struct{ c rest.Interface }

func (a apiServerReviewer) Review(ctx context.Context, token string, audiences []string) (authenticationv1.TokenReviewStatus, error) {
	body, err := json.Marshal(&authenticationv1.TokenReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "authentication.k8s.io/v1", Kind: "TokenReview"},
		Spec:     authenticationv1.TokenReviewSpec{Token: token, Audiences: audiences},
	})
	if err != nil {
		return authenticationv1.TokenReviewStatus{}, err
	}
	// Not core/v1 (the client's group): an absolute path, JSON both ways.
	raw, err := a.c.Post().AbsPath("/apis/authentication.k8s.io/v1/tokenreviews").
		SetHeader("Content-Type", "application/json").SetHeader("Accept", "application/json").
		Body(body).DoRaw(ctx)
	if err != nil {
		return authenticationv1.TokenReviewStatus{}, err
	}
	var review authenticationv1.TokenReview
	if err := json.Unmarshal(raw, &review); err != nil {
		return authenticationv1.TokenReviewStatus{}, fmt.Errorf("decoding the TokenReview: %w", err)
	}
	return review.Status, nil
}
