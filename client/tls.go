package client

import (
	"context"
	"crypto/tls"
	"fmt"

	"github.com/peerlimit/peerlimit/internal/tlsfiles"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// LoadTLS builds a Config.TLS from PEM files. caFile verifies the nodes'
// certificates (empty: the system's roots). certFile and keyFile, both or
// neither, are the client certificate for nodes that require mutual TLS.
// serverName, if not empty, is the name verified in every node's
// certificate instead of the address dialed.
func LoadTLS(caFile, certFile, keyFile, serverName string) (*tls.Config, error) {
	c, err := tlsfiles.Client(caFile, certFile, keyFile, serverName)
	if err != nil {
		return nil, fmt.Errorf("peerlimit client: %w", err)
	}
	return c, nil
}

// Credentials returns the dial options that secure a raw gRPC connection
// to a node as Client does its own: TLS with tc, else plaintext; and, with
// a token, its bearer credentials (BearerToken), which grpc-go refuses to
// send over plaintext unless tokenWithoutTLS. For the CLI, the load
// generator and programs that call the API without the Client.
func Credentials(tc *tls.Config, token string, tokenWithoutTLS bool) []grpc.DialOption {
	creds := insecure.NewCredentials()
	if tc != nil {
		creds = credentials.NewTLS(tc)
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	if token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(BearerToken(token, !tokenWithoutTLS)))
	}
	return opts
}

// BearerToken returns per-call credentials sending "authorization: Bearer
// <token>" with every call, for raw gRPC clients of the node's API (the
// CLI, the load generator); Config.Token uses the same. With requireTLS,
// grpc-go refuses to send it over a plaintext connection.
func BearerToken(token string, requireTLS bool) credentials.PerRPCCredentials {
	return bearer{md: map[string]string{"authorization": "Bearer " + token}, requireTLS: requireTLS}
}

// bearer holds a map shared by every call: grpc-go copies it into the
// call's headers and never writes to it.
type bearer struct {
	md         map[string]string
	requireTLS bool
}

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return b.md, nil
}

func (b bearer) RequireTransportSecurity() bool { return b.requireTLS }
