package peer

import (
	"slices"
	"time"

	"github.com/valyala/fasthttp"
)

// GetShards asks other nodes for the part of a GET over shards this node
// does not host: pathQuery (a path with its query string) with
// &shards=… added, sent to a covering set of nodes (router.Cover over
// Targets, as SearchShards plans) in parallel, each shard to one node. The
// shards of a part that failed with a 503 or could not be reached are
// planned again over the nodes not tried yet, until every shard has
// answered or no node is left (503); another failure ends it. The 200
// bodies come back in no particular order: the caller merges them.
func (c *Client) GetShards(ns, pathQuery string, shards []int, deadline time.Time) ([][]byte, *Error) {
	return askCovering(c, shards, "", func(p SearchPart) ([]byte, *Error) {
		return c.getPart(p.Addr, ns, pathQuery, p.Shards, deadline)
	})
}

// getPart GETs pathQuery&shards=… from addr as the cluster principal in
// namespace ns.
func (c *Client) getPart(addr, ns, pathQuery string, shards []int, deadline time.Time) ([]byte, *Error) {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod(fasthttp.MethodGet)
	req.Header.Set(HopHeader, "1")
	c.sign(req)
	setNamespace(&req.Header, ns)
	sep := "?"
	if slices.Contains([]byte(pathQuery), '?') {
		sep = "&"
	}
	req.SetRequestURI(c.URL(addr, pathQuery+sep+"shards="+shardList(shards)))
	if err := c.host(addr).DoDeadline(req, resp, deadline); err != nil {
		return nil, unavailable(err.Error())
	}
	if err := partError(resp); err != nil {
		return nil, err
	}
	return append([]byte(nil), resp.Body()...), nil
}
