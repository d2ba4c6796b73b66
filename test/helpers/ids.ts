// Ids as the layout makes them (src/redirect/layout.ts): a test names them
// by number, and says which kind each number is.
import type { FileId, NodeId, PcId, VcId } from '../../src/redirect/layout'

export const fileId = (n: number): FileId => n as FileId
export const pcId = (n: number): PcId => n as PcId
export const vcId = (n: number): VcId => n as VcId
export const nodeId = (n: number): NodeId => n as NodeId
