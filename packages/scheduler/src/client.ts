// The client lives in @aenv/protocol so nodes reach the scheduler without depending on it.
export { createSchedulerClient, type SchedulerClient } from '@aenv/protocol';
