// Service Bus namespace and the case-events queue. Standard tier at least: Basic supports neither
// sessions nor duplicate detection. requiresSession and requiresDuplicateDetection can only be set
// when the queue is created; changing them later means a new queue.

param location string
param tags object

@description('Namespace name: 6-50 letters, digits and hyphens, starting with a letter, globally unique.')
@minLength(6)
@maxLength(50)
param namespaceName string

@description('Queue name; the app reads it from CASE_EVENTS_QUEUE.')
param queueName string

@allowed([
  'Standard'
  'Premium'
])
param sku string = 'Standard'

@allowed([
  1
  2
  4
  8
  16
])
@description('Messaging units of a Premium namespace (ignored on Standard).')
param premiumMessagingUnits int = 1

@description('How long the broker remembers a message id and drops a resend of it (ISO 8601, 20 seconds to 7 days). The ingress sets message id = webhook delivery id, so a webhook redelivered within this window is dropped; the effect ledger still guards anything older.')
param duplicateDetectionWindow string = 'P1D'

@description('Peek-lock (and session lock) duration, at most PT5M. The Functions host renews it while a function runs.')
param lockDuration string = 'PT5M'

@description('Deliveries before a message is dead-lettered. Service Bus triggers ignore @app.retry: every exception is one delivery.')
@minValue(1)
param maxDeliveryCount int = 10

@description('Public network access to Service Bus: Disabled once the app reaches it over a private endpoint (see docs/design.md#threats).')
@allowed([
  'Enabled'
  'Disabled'
])
param publicNetworkAccess string = 'Enabled'

resource namespace 'Microsoft.ServiceBus/namespaces@2024-01-01' = {
  name: namespaceName
  location: location
  tags: tags
  sku: {
    name: sku
    tier: sku
    capacity: sku == 'Premium' ? premiumMessagingUnits : 1
  }
  properties: {
    disableLocalAuth: true
    minimumTlsVersion: '1.2'
    publicNetworkAccess: publicNetworkAccess
  }
}

resource queue 'Microsoft.ServiceBus/namespaces/queues@2024-01-01' = {
  parent: namespace
  name: queueName
  properties: {
    // One case at a time: the sender sets session id = case id.
    requiresSession: true
    // The sender sets message id = webhook delivery id: the broker drops redelivered webhooks.
    requiresDuplicateDetection: true
    duplicateDetectionHistoryTimeWindow: duplicateDetectionWindow
    maxDeliveryCount: maxDeliveryCount
    lockDuration: lockDuration
    deadLetteringOnMessageExpiration: true
    defaultMessageTimeToLive: 'P14D'
    enableBatchedOperations: true
    enablePartitioning: false
  }
}

output namespaceName string = namespace.name
output namespaceId string = namespace.id
output queueName string = queue.name
output queueId string = queue.id
// The host part of the endpoint (https://<namespace>.servicebus.windows.net:443/), so the cloud's
// DNS suffix is taken from the service rather than assumed.
output fullyQualifiedNamespace string = split(split(namespace.properties.serviceBusEndpoint, '/')[2], ':')[0]
