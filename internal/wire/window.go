package wire

import "google.golang.org/grpc"

// Window is the fixed flow-control window of every stream and connection
// peerlimit makes or serves.
//
// Without a window set, grpc-go sizes them by estimating the
// bandwidth-delay product: on data it receives it sends a PING, and a
// window update with the answer. peerlimit's messages are small (a check,
// a batch of them: hundreds of bytes) and frequent, so on a link of one
// batch at a time that is one more write and read per message round trip
// on both sides. Measured with make bench-scale's frame (unary checks to a
// random node of 5, /proc/<pid>/io of every node): 3.1 reads and 1.8
// writes per check with the estimate, 2.2 and 1.4 with a fixed window;
// the nodes' CPU per check fell by 15 % (docs/benchmarks.md, "Scaling
// out"). 1 MiB is ample for any message a node sends (4 MiB at most, in
// chunks), and the memory it could pin is the sender's, bounded by what
// the receiver reads.
const Window = 1 << 20

// Dial is the dial options of every connection peerlimit makes: Codec and
// the fixed Window.
func Dial() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithDefaultCallOptions(grpc.ForceCodecV2(Codec)),
		grpc.WithInitialWindowSize(Window), grpc.WithInitialConnWindowSize(Window)}
}

// ServerWindow is the server options of the fixed Window.
func ServerWindow() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.InitialWindowSize(Window), grpc.InitialConnWindowSize(Window)}
}
