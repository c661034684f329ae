// Package gcp stands in for OpenTelemetry's GCP resource detector, which Debian does
// not package: it detects nothing, as the real one does off Google Cloud.
package gcp

import (
	"context"

	"go.opentelemetry.io/otel/sdk/resource"
)

type detector struct{}

// NewDetector returns a detector that finds no GCP resource attributes.
func NewDetector() resource.Detector { return detector{} }

func (detector) Detect(context.Context) (*resource.Resource, error) {
	return resource.Empty(), nil
}
