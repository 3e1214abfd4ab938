// The function app's user-assigned managed identity. User-assigned rather than system-assigned so
// every role assignment (rbac.bicep) exists before the app is created and starts: the host's first
// storage, Service Bus, Cosmos DB and Key Vault calls then do not race role creation.

@description('Name of the user-assigned identity.')
param name string

param location string
param tags object

resource identity 'Microsoft.ManagedIdentity/userAssignedIdentities@2023-01-31' = {
  name: name
  location: location
  tags: tags
}

output id string = identity.id
output name string = identity.name
output principalId string = identity.properties.principalId
output clientId string = identity.properties.clientId
