import { describe, expect, it } from 'vitest'
import { replicaHint } from './pages/Cluster'
import type { ClusterShard, ClusterStatus } from './api'

const shard = (replicas: number): ClusterShard =>
  ({ shard_id: 1, leader_node: 1, term: 1, replicas: Array.from({ length: replicas }, (_, i) => ({ node_id: i + 1, role: i ? 'follower' : 'leader' })) }) as ClusterShard

describe('replicaHint', () => {
  it('counts the replicas the shards have, not the configured target', () => {
    const st = { node_id: 1, replicas: 3, nodes: [], shards: [shard(1), shard(1)] } as unknown as ClusterStatus
    expect(replicaHint(st)).toBe('1 replica each')
  })
  it('reports the least replicated shard', () => {
    const st = { node_id: 1, replicas: 3, nodes: [], shards: [shard(3), shard(2)] } as unknown as ClusterStatus
    expect(replicaHint(st)).toBe('2 replicas each')
  })
  it('does not count learners (non-voting replicas still catching up)', () => {
    const s = shard(3)
    s.replicas[2].role = 'learner'
    const st = { node_id: 1, nodes: [], shards: [s] } as unknown as ClusterStatus
    expect(replicaHint(st)).toBe('2 replicas each')
  })
  it('says nothing without shards', () => {
    expect(replicaHint({ node_id: 1, nodes: [], shards: [] } as unknown as ClusterStatus)).toBeUndefined()
  })
})
