package peer

import (
	"encoding/json"
	"slices"
	"strconv"
	"sync"
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
	var out [][]byte
	tried := map[string]bool{}
	why := ""
	for len(shards) > 0 {
		plan, uncovered := c.planSearch(shards, tried)
		if len(uncovered) > 0 {
			msg := "no node hosting shard " + strconv.Itoa(uncovered[0]) + " answered"
			if why != "" {
				msg += " (" + why + ")"
			}
			return nil, unavailable(msg)
		}
		type answer struct {
			body []byte
			err  *Error
		}
		answers := make([]answer, len(plan))
		var wg sync.WaitGroup
		for i, p := range plan {
			wg.Add(1)
			go func() {
				defer wg.Done()
				answers[i].body, answers[i].err = c.getPart(p.Addr, ns, pathQuery, p.Shards, deadline)
			}()
		}
		wg.Wait()
		shards = shards[:0:0]
		for i, a := range answers {
			switch {
			case a.err == nil:
				out = append(out, a.body)
			case a.err.Status == 503:
				tried[plan[i].Addr] = true
				why = plan[i].Addr + ": " + a.err.Msg
				shards = append(shards, plan[i].Shards...)
			default:
				return nil, a.err
			}
		}
		slices.Sort(shards)
	}
	return out, nil
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
	if code := resp.StatusCode(); code != 200 {
		var e struct {
			Error string `json:"error"`
			Code  string `json:"code"`
		}
		_ = json.Unmarshal(resp.Body(), &e)
		if code >= 400 && code < 500 && code != 429 && e.Code != "" {
			return nil, &Error{Status: code, Code: e.Code, Msg: e.Error}
		}
		return nil, unavailable("status " + strconv.Itoa(code) + ": " + e.Error)
	}
	return append([]byte(nil), resp.Body()...), nil
}
